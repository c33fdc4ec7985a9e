package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/config"
)

// logBuffer collects JSON log lines while a server runs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the records whose msg is msg.
func (l *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestLogLevels: a client's connection is logged at debug level only, and
// a failed request is one line, with its cause, at info level.
func TestLogLevels(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			var logs logBuffer
			s := start(t, Options{Server: config.Server{Memory: true}, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))})
			cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", s.AMQPAddr())
			client, err := azservicebus.NewClientFromConnectionString(cs, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sender, err := client.NewSender("nope", nil)
			if err != nil {
				t.Fatal(err)
			}
			err = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
			var sbErr *azservicebus.Error
			if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeNotFound {
				t.Fatalf("send to a missing queue: %v", err)
			}
			if err := client.Close(ctx); err != nil {
				t.Fatal(err)
			}
			base := "http://" + s.HTTPAddr().String()
			req, err := http.NewRequestWithContext(ctx, "GET", base+"/nope?api-version=2021-05", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, base, time.Now().Add(time.Hour)))
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("GET /nope: %d", resp.StatusCode)
			}
			stop(t, s)

			if got := logs.lines(t, "management request failed"); len(got) != 1 || got[0]["status"] != float64(404) || got[0]["err"] == nil {
				t.Errorf("management request failed lines: %v", got)
			}

			failed := logs.lines(t, "request failed")
			if len(failed) != 1 || !strings.Contains(fmt.Sprint(failed[0]["err"]), "could not be found") || failed[0]["trackingId"] == nil {
				t.Errorf("request failed lines: %v", failed)
			}
			want := 0
			if level == slog.LevelDebug {
				want = 1
			}
			for _, msg := range []string{"connection opened", "connection closed"} {
				if got := logs.lines(t, msg); len(got) != want {
					t.Errorf("%q logged %d times at level %v, want %d: %v", msg, len(got), level, want, got)
				}
			}
		})
	}
}
