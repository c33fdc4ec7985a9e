package console

// Large messages: the console never reads a body of largeFrom stored
// bytes or more into memory. Its lists and the message page inspect with
// the bodies left in the store (broker.WithStreamedBodies) and keep only
// the first previewBytes of such a message's payload (what the page shows,
// what the list's body filters look at); the message page links to
// message/body, which streams the whole payload from the store as the
// browser downloads it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

const (
	// largeFrom is the stored size from which a body stays in the store.
	largeFrom = 256 << 10
	// previewBytes is how much of a large body the console keeps.
	previewBytes = 1 << 10
)

// inspect is Broker.Inspect with large bodies left in the store and cut
// to their preview (takePreview).
func (c *Console) inspect(ctx context.Context, path string, from int64, n int) ([]*broker.Delivery, error) {
	ds, err := c.b.Inspect(broker.WithStreamedBodies(ctx, largeFrom), path, from, n)
	if err != nil {
		return nil, err
	}
	for i, d := range ds {
		if _, err := takePreview(d); err != nil {
			for _, d := range ds[i+1:] {
				if d.Body != nil {
					d.Body.Close()
				}
			}
			return nil, err
		}
	}
	return ds, nil
}

// takePreview replaces d's streamed body (if any) by its first
// previewBytes, as one data section in Message.Body, closes the stream,
// and returns the payload's whole length; -1 if d's body was in memory.
// A body that is not data sections or one binary or string value keeps
// its first previewBytes of encoding (shown raw) and its encoded length.
func takePreview(d *broker.Delivery) (int64, error) {
	b := d.Body
	if b == nil {
		return -1, nil
	}
	d.Body = nil
	defer b.Close()
	n, err := message.PayloadLen(b, b.Len())
	var r io.Reader = message.NewPayloadReader(b, b.Len())
	switch {
	case errors.Is(err, message.ErrNotPayload):
		n, r = b.Len(), io.NewSectionReader(b, 0, b.Len())
	case err != nil:
		return 0, fmt.Errorf("reading message %d: %w", d.SequenceNumber, err)
	}
	p := make([]byte, min(n, previewBytes))
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, fmt.Errorf("reading message %d: %w", d.SequenceNumber, err)
	}
	if errors.Is(err, message.ErrNotPayload) {
		d.Message.Body = p
	} else {
		d.Message.Body = encodeDataBody(p)
	}
	return n, nil
}

// messageBody streams a message's payload as a download (GET
// message/body?path=&sub=&seq=): application/octet-stream, whatever the
// message's content type, so that a browser never renders it.
func (c *Console) messageBody(w http.ResponseWriter, r *http.Request, s *session) error {
	entity, sub, seq, err := messageRef(r, s)
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	ds, err := c.b.Inspect(broker.WithStreamedBodies(ctx, 1), subQueuePath(entity, sub), seq, 1)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.Body != nil {
			defer d.Body.Close()
		}
	}
	if len(ds) == 0 || ds[0].SequenceNumber != seq {
		return &userError{status: http.StatusNotFound, msg: fmt.Sprintf("Message %d is not in '%s' (any more).", seq, subQueuePath(entity, sub))}
	}
	d := ds[0]
	var n int64
	var body io.Reader
	if b := d.Body; b != nil {
		n, err = message.PayloadLen(b, b.Len())
		body = message.NewPayloadReader(b, b.Len())
		if errors.Is(err, message.ErrNotPayload) {
			n, body, err = b.Len(), io.NewSectionReader(b, 0, b.Len()), nil
		}
		if err != nil {
			return fmt.Errorf("reading message %d: %w", seq, err)
		}
	} else {
		p := decodeBody(d.Message.Body).Bytes
		n, body = int64(len(p)), bytes.NewReader(p)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="message-%d.bin"`, seq))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	// An error past the header can only cut the download short.
	_, _ = io.Copy(w, io.LimitReader(body, n))
	return nil
}
