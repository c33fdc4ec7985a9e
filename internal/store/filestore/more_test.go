package filestore

import (
	"bytes"
	"testing"

	"github.com/busbarmq/busbar/internal/store"
	"github.com/busbarmq/busbar/internal/vfs"
)

// splitAt cuts data into a head of n bytes and the rest, as the broker
// hands a large message: its encoded head, then its body where it lies.
func splitAt(data []byte, n int) (head, more []byte) {
	n = min(n, len(data))
	return bytes.Clone(data[:n]), bytes.Clone(data[n:])
}

// moreBatches are batches whose Data come in two pieces of every size
// that matters (store.Op.More), and the same batches with their Data
// joined.
func moreBatches() (split, joined []*store.Batch) {
	var s, j []*store.Batch
	add := func(ops ...store.Op) {
		sb, jb := &store.Batch{}, &store.Batch{}
		for _, op := range ops {
			sb.Add(op)
			if op.Kind == store.OpAppend || op.Kind == store.OpRewrite {
				op.Data, op.More = append(bytes.Clone(op.Data), op.More...), nil
			}
			jb.Add(op)
		}
		s, j = append(s, sb), append(j, jb)
	}
	op := func(kind store.OpKind, seq uint64, data []byte, head int) store.Op {
		h, m := splitAt(data, head)
		return store.Op{Kind: kind, EntityID: 1, Seq: seq, Meta: []byte{byte(seq)}, Data: h, More: m}
	}
	add(store.Op{Kind: store.OpPutEntity, EntityID: 1, Name: "q"})
	add(op(store.OpAppend, 1, vecData(21), 90)) // a large More behind a small head
	add(op(store.OpAppend, 2, vecData(2), 50))  // both small
	add(op(store.OpAppend, 3, vecData(3), 0),   // an empty head
		op(store.OpAppend, 4, vecData(4), 60),
		op(store.OpAppend, 5, vecData(30), vecMin+10),                               // both pieces holes
		op(store.OpAppend, 6, bytes.Repeat([]byte{6}, combineMin+5), combineMin-20)) // combined, no hole
	add(op(store.OpRewrite, 2, vecData(33), 70), store.Op{Kind: store.OpPutValue, EntityID: 1, Key: "k", Data: []byte("v")})
	add(op(store.OpRewrite, 1, vecData(36), 100)) // last in its record
	return s, j
}

// A record whose Data comes in two pieces is byte for byte the record of
// the joined Data (checksums included), with its pieces of holeMin bytes
// and more left as holes.
func TestMoreRecordMatchesJoined(t *testing.T) {
	split, joined := moreBatches()
	for i := range split {
		want, err := encodeBatch(nil, joined[i])
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeBatch(nil, split[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d: the two-piece record differs from the joined one", i)
		}
		var holes []hole
		got, err = encodeBatchBlobs(nil, split[i], nil, &holes)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, op := range split[i].Ops {
			for _, p := range [][]byte{op.Data, op.More} {
				if len(p) >= holeMin && (op.Kind == store.OpAppend || op.Kind == store.OpRewrite) {
					n++
				}
			}
		}
		if len(holes) != n {
			t.Fatalf("batch %d: %d holes, want %d", i, len(holes), n)
		}
		for _, h := range holes {
			copy(got[h.at:], h.data)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d: the two-piece record with its holes filled differs from the joined one", i)
		}
	}
}

// The log a store writes for two-piece Data is byte for byte the log it
// writes for the same Data joined, on the OS file system (holes written
// as iovecs of their own) and on Mem (copied), and reads back the same,
// though the caller overwrites its pieces as soon as Commit returns.
func TestMoreLogMatchesJoined(t *testing.T) {
	for _, kind := range []string{"os", "mem"} {
		t.Run(kind, func(t *testing.T) {
			write := func(batches []*store.Batch) (read func() []byte, data map[uint64][]byte) {
				opts := Options{Dir: t.TempDir(), SegmentSize: 1 << 20, BackgroundInterval: -1}
				if kind == "mem" {
					opts = memOpts(vfs.NewMem())
					opts.SegmentSize = 1 << 20
				}
				s := mustOpen(t, opts)
				for i, b := range batches {
					if err := s.Commit(b, i%3 != 2); err != nil {
						t.Fatal(err)
					}
					for _, op := range b.Ops {
						if len(op.More) > 0 {
							clear(op.More) // the caller's buffer is its own again
						}
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = mustOpen(t, opts)
				defer s.Close()
				data = map[uint64][]byte{}
				if err := s.Recover(store.Visitor{Message: func(m store.Message) error {
					d, err := s.ReadData(m.EntityID, m.Seq)
					data[m.Seq] = d
					return err
				}}); err != nil {
					t.Fatal(err)
				}
				read = func() []byte {
					fsys := opts.FS
					if fsys == nil {
						fsys = vfs.OS()
					}
					f, err := fsys.Open(segName(opts.Dir, 1))
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					n, err := f.Size()
					if err != nil {
						t.Fatal(err)
					}
					b := make([]byte, n)
					if _, err := f.ReadAt(b, 0); err != nil {
						t.Fatal(err)
					}
					return b
				}
				return read, data
			}
			split, joined := moreBatches()
			readSplit, gotData := write(split)
			readJoined, wantData := write(joined)
			if a, b := readSplit(), readJoined(); !bytes.Equal(a, b) {
				t.Fatalf("the segments differ (%d and %d bytes)", len(a), len(b))
			}
			if len(gotData) != 6 {
				t.Fatalf("%d messages read back, want 6", len(gotData))
			}
			for seq, d := range wantData {
				if !bytes.Equal(gotData[seq], d) {
					t.Fatalf("message %d reads back differently", seq)
				}
			}
		})
	}
}
