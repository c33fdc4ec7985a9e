package broker

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// TestLargeForwardAndDeadLetterKeepBody: a large message auto-forwarded
// and then dead-lettered with a reason keeps its body where the send put
// it: the store writes only the new heads (composite blobs, small .ref
// files), the body arrives whole at each step, and once the message is
// gone so are all its files.
func TestLargeForwardAndDeadLetterKeepBody(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.Open(filestore.Options{Dir: dir, BackgroundInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, st)
	t.Cleanup(func() { st.Close() })
	big := func(p *QueueProperties) { p.MaxMessageSizeInKilobytes = 102400 }
	e.queue("out", big)
	e.queue("in", big, forwardTo("out"))

	const size = 4 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	f, err := os.Create(filepath.Join(t.TempDir(), "body"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := binary.BigEndian.AppendUint32([]byte{0x00, 0x53, 0x75, 0xb0}, size)
	if _, err := f.Write(append(enc, payload...)); err != nil {
		t.Fatal(err)
	}
	m := &message.Message{MessageID: "big", Durable: true, BodyTail: io.NewSectionReader(f, 0, int64(len(enc)+size))}
	e.send("in", m)
	e.flush()

	blobs := func() (plain, refs []int64) {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			info, err := ent.Info()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.HasSuffix(ent.Name(), ".blob"):
				plain = append(plain, info.Size())
			case strings.HasSuffix(ent.Name(), ".ref"):
				refs = append(refs, info.Size())
			}
		}
		return plain, refs
	}
	check := func(step string, d *Delivery) {
		t.Helper()
		got, ok := decodeDataBody(d.Message.Body)
		if !ok || sha256.Sum256(got) != sha256.Sum256(payload) {
			t.Fatalf("%s: the body changed (%d bytes)", step, len(got))
		}
		plain, refs := blobs()
		if len(plain) != 1 || plain[0] < size || len(refs) != 1 || refs[0] > 4<<10 {
			t.Fatalf("%s: blob files of %v bytes and composites of %v: want the one body and one small head", step, plain, refs)
		}
	}
	d := e.recv1("out")
	check("forwarded", d)
	if err := e.b.DeadLetter(ctx, "out", d.LockToken, "TooBig", "kept its body", nil); err != nil {
		t.Fatal(err)
	}
	e.flush()
	ds := e.peek("out/$DeadLetterQueue", 0, 1)
	if len(ds) != 1 {
		t.Fatalf("dead-letter queue: %d messages", len(ds))
	}
	if got := prop(ds[0], PropDeadLetterReason); got != "TooBig" {
		t.Fatalf("DeadLetterReason %v", got)
	}
	check("dead-lettered", ds[0])
	e.take("out/$DeadLetterQueue")
	plain, refs := blobs()
	if len(plain)+len(refs) != 0 {
		// The removal is synced by the receive; the next synced commit sweeps.
		e.send("out", msg("sweep"))
		e.take("out")
		if plain, refs = blobs(); len(plain)+len(refs) != 0 {
			t.Fatalf("files left once the message is gone: %v, %v", plain, refs)
		}
	}
}

// decodeDataBody is the payload of one data section.
func decodeDataBody(b []byte) ([]byte, bool) {
	if len(b) < 8 || b[0] != 0x00 || b[1] != 0x53 || b[2] != 0x75 || b[3] != 0xb0 {
		return nil, false
	}
	n := binary.BigEndian.Uint32(b[4:8])
	return b[8:], int(n) == len(b)-8
}
