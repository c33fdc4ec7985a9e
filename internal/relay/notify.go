package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// NodePathPrefix starts the paths of the requests a node makes on its
// own behalf (Notify), not a client's: the internal listener serves them
// only when they carry no PrincipalHeader, which every forwarded client
// request does.
const NodePathPrefix = "/$cluster/"

// maxNotifyAnswer bounds what is read of a Notify's answer.
const maxNotifyAnswer = 4 << 10

// Notify POSTs body to path (under NodePathPrefix) on node o's internal
// listener, on this node's own behalf (no principal), over the
// forwarder's proven connections; any answer but a 2xx is an error.
func (f *HTTPForwarder) Notify(ctx context.Context, o Owner, path string, body []byte) error {
	if !strings.HasPrefix(path, NodePathPrefix) {
		return fmt.Errorf("relay: a node's own request path %q is not under %s", path, NodePathPrefix)
	}
	if o.Addr == "" {
		return errors.New("relay: the node's address is not known")
	}
	tr, err := f.client(o)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+o.Addr+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.URL.Path = path
	resp, err := tr.RoundTrip(req)
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		// Closed meanwhile: this request's connection is not kept.
		defer tr.CloseIdleConnections()
	}
	if err != nil {
		return fmt.Errorf("relay: %s to %s (%s): %w", path, o.Node, o.Addr, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxNotifyAnswer))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("relay: %s to %s (%s): %s: %s", path, o.Node, o.Addr, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
