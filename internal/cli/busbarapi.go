package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
)

// busbarAPI calls one of Busbar's own admin endpoints (/$faults,
// /$rules/dry-run), which the SDK's admin client does not know: JSON in
// and out, on the admin address the other commands use, with a SAS token
// made from the connection string (or its SharedAccessSignature). in nil
// sends no body; out nil ignores the answer.
func (a *app) busbarAPI(ctx context.Context, method, path string, in, out any) error {
	_, cs, err := a.connection()
	if err != nil {
		return err
	}
	scheme, addr, err := a.adminEndpoint(cs)
	if err != nil {
		return err
	}
	if addr == "" { // not the emulator: the endpoint itself, over https, as Azure
		scheme, addr = "https", cs.Host
	}
	token := cs.SharedAccessSignature
	if token == "" {
		token = auth.NewToken(cs.SharedAccessKeyName, cs.SharedAccessKey, "sb://"+cs.Host+"/", time.Now().Add(time.Hour))
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+path, body)
	if err != nil {
		return usageErrorf("admin address %q: %v", addr, err)
	}
	req.Header.Set("Authorization", token)
	if h := a.nsHostHeader(addr); h != "" {
		req.Host = h
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		if isConnRefused(err) {
			return &detailError{"cannot reach the broker (is it running? see --connection-string and --admin): " + err.Error(), err}
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return apiError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("the broker's answer is not the JSON expected: %v", err)
	}
	return nil
}

// apiError is an <Error> answer of the admin API as an error with the
// exit code it calls for.
func apiError(status int, body []byte) error {
	var e struct {
		Detail string `xml:"Detail"`
	}
	msg := strings.TrimSpace(string(body))
	if xml.Unmarshal(body, &e) == nil && e.Detail != "" {
		msg = e.Detail
	}
	if _, rest, ok := strings.Cut(msg, "SubCode="); ok {
		if _, after, ok := strings.Cut(rest, ". "); ok {
			msg = after
		}
	}
	err := fmt.Errorf("%s", trimTracking(msg))
	switch status {
	case http.StatusBadRequest:
		return &exitError{code: ExitUsage, err: err}
	case http.StatusNotFound:
		return &exitError{code: ExitNotFound, err: err}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &exitError{code: ExitUnauthorized, err: fmt.Errorf("access denied (check the connection string's SharedAccessKeyName and SharedAccessKey): %w", err)}
	}
	return fmt.Errorf("%d %s: %w", status, http.StatusText(status), err)
}
