package admin

// Large messages on the HTTP data plane, never held whole: a received
// message of at least dataStreamFrom stored bytes comes with its body
// left in the store (broker.Receiver.StreamBodies), and its payload is
// written to the response from there as the client reads it; a sent one
// whose Content-Length is at least dataStreamFrom goes to a spool file of
// the store's as it arrives (broker.NewSpool) and reaches the store from
// there, as a spooled AMQP transfer does. At most maxDataSpools such
// sends are in progress at once, in all.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// dataStreamFrom is the stored size from which the data plane streams a
// received message's body: the large-message threshold's default.
const dataStreamFrom = 256 << 10

// maxDataSpools bounds the data plane's large sends in progress.
const maxDataSpools = 16

// maxSectionHead is the longest section head: a ulong descriptor (10
// bytes) and a vbin32/str32 constructor with its length (5).
const maxSectionHead = 15

// errNotPayload is a body that is not data sections or one amqp-value
// binary or string (what decodeAMQPBody takes apart).
var errNotPayload = errors.New("not a data or string body")

// bodySection reads the head of the body section at pos of the size
// bytes of encoded body b: where its payload starts and how long it is,
// and whether it is an amqp-value.
func bodySection(b io.ReaderAt, size, pos int64) (off, n int64, value bool, err error) {
	var buf [maxSectionHead]byte
	k, err := b.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, err
	}
	h := buf[:k]
	code, dn := sectionDescriptor(h)
	if dn == 0 || (code != descData && code != descValue) || len(h) < dn+2 {
		return 0, 0, false, errNotPayload
	}
	value = code == descValue
	switch c := h[dn]; {
	case c == 0xa0 || (value && c == 0xa1):
		off, n = pos+int64(dn)+2, int64(h[dn+1])
	case (c == 0xb0 || (value && c == 0xb1)) && len(h) >= dn+5:
		off, n = pos+int64(dn)+5, int64(binary.BigEndian.Uint32(h[dn+1:]))
	default:
		return 0, 0, false, errNotPayload
	}
	if off+n > size {
		return 0, 0, false, errNotPayload
	}
	return off, n, value, nil
}

// payloadLen walks the sections of the size bytes of encoded body b as
// decodeAMQPBody does and returns the payload's length: errNotPayload if
// b is not such a body.
func payloadLen(b io.ReaderAt, size int64) (int64, error) {
	var total int64
	for pos, i := int64(0), 0; pos < size; i++ {
		off, n, value, err := bodySection(b, size, pos)
		if err != nil {
			return 0, err
		}
		if value && i > 0 {
			return 0, errNotPayload
		}
		if value && off+n != size {
			return 0, errNotPayload // an amqp-value is the only section
		}
		total += n
		pos = off + n
	}
	return total, nil
}

// payloadReader reads the payload of a body payloadLen accepted, a
// section at a time.
type payloadReader struct {
	b    io.ReaderAt
	size int64 // of the encoded body
	c    io.Closer
	pos  int64 // next byte of the body to read
	left int64 // payload bytes left in the current section
}

func (r *payloadReader) Read(p []byte) (int, error) {
	for r.left == 0 {
		if r.pos >= r.size {
			return 0, io.EOF
		}
		off, n, _, err := bodySection(r.b, r.size, r.pos)
		if err != nil {
			return 0, err
		}
		r.pos, r.left = off, n
	}
	p = p[:min(int64(len(p)), r.left)]
	k, err := r.b.ReadAt(p, r.pos)
	r.pos += int64(k)
	r.left -= int64(k)
	if errors.Is(err, io.EOF) && r.left == 0 {
		err = nil
	}
	return k, err
}

func (r *payloadReader) Close() error { return r.c.Close() }

// streamBody sets rep's body to the payload of the streamed body b, and
// takes b (closing it when the response is written, or here). A body of
// another shape is read whole, as an unstreamed one is.
func streamBody(rep *reply, b *broker.BodyStream) error {
	n, err := payloadLen(b, b.Len())
	if err == nil {
		rep.stream, rep.streamLen = &payloadReader{b: b, size: b.Len(), c: b}, n
		return nil
	}
	defer b.Close()
	if !errors.Is(err, errNotPayload) {
		return fmt.Errorf("reading the message body: %w", err)
	}
	raw := make([]byte, b.Len())
	if k, err := b.ReadAt(raw, 0); int64(k) < b.Len() {
		return fmt.Errorf("reading the message body: %w", err)
	}
	rep.body, _ = decodeAMQPBody(raw)
	return nil
}

// dataSendSpooled sends the request's body, of Content-Length at least
// dataStreamFrom, as one message whose body is a data section spooled to
// the store as it is read.
func (h *Handler) dataSendSpooled(rq *request, entity string, limit int64, ct string) (*reply, error) {
	n := rq.r.ContentLength
	if n > limit {
		return nil, &broker.Error{Kind: broker.KindMessageTooLarge, Msg: "The request body is over " + strconv.FormatInt(limit, 10) + " bytes, more than the entity's maximum message size allows."}
	}
	m := &message.Message{ContentType: ct}
	if err := headerProps(rq, m); err != nil {
		return nil, err
	}
	select {
	case h.dataSpools <- struct{}{}:
		defer func() { <-h.dataSpools }()
	default:
		return nil, &broker.Error{Kind: broker.KindQuotaExceeded, Msg: fmt.Sprintf("%d large messages are being sent over HTTP already; retry later.", maxDataSpools)}
	}
	sp, err := h.broker.NewSpool()
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	// One data section: its head, then the body as it arrives.
	if err := sp.Write(binary.BigEndian.AppendUint32([]byte{0x00, 0x53, descData, 0xb0}, uint32(n))); err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	var got int64
	body := http.MaxBytesReader(nil, rq.r.Body, n)
	for {
		k, err := body.Read(buf)
		if k > 0 {
			if werr := sp.Write(buf[:k]); werr != nil {
				return nil, werr
			}
			got += int64(k)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, badRequest("Reading the request body failed: %v.", err)
		}
	}
	if got != n {
		return nil, badRequest("The request body has %d bytes; its Content-Length says %d.", got, n)
	}
	m.BodyTail = io.NewSectionReader(sp, 0, sp.Size())
	return h.sendMessages(rq, entity, []*message.Message{m})
}
