package admin

// Large messages on the HTTP data plane, never held whole: a received
// message of at least dataStreamFrom stored bytes comes with its body
// left in the store (broker.Receiver.StreamBodies), and its payload
// (message.PayloadReader) is written to the response from there as the
// client reads it; a sent one whose Content-Length is at least
// dataStreamFrom goes to a spool file of the store's as it arrives
// (broker.NewSpool) and reaches the store from there, as a spooled AMQP
// transfer does. At most maxDataSpools such sends are in progress at
// once, in all.

import (
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

// payloadStream is a streamed body's payload, closing the body.
type payloadStream struct {
	*message.PayloadReader
	io.Closer
}

// streamBody sets rep's body to the payload of the streamed body b, and
// takes b (closing it when the response is written, or here). A body of
// another shape is read whole, as an unstreamed one is.
func streamBody(rep *reply, b *broker.BodyStream) error {
	n, err := message.PayloadLen(b, b.Len())
	if err == nil {
		rep.stream, rep.streamLen = payloadStream{message.NewPayloadReader(b, b.Len()), b}, n
		return nil
	}
	defer b.Close()
	if !errors.Is(err, message.ErrNotPayload) {
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
	if err := sp.Write(message.AppendDataSectionHead(nil, uint32(n))); err != nil {
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
