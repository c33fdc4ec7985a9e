package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/config"
)

type nsListing struct {
	Namespaces []struct {
		Name, Origin, DataDir string
		Default               bool
		Entities              int
	}
}

func listNamespaces(t *testing.T, s *Server) nsListing {
	t.Helper()
	code, body := adminJSON(t, s, http.MethodGet, "/$namespaces", "")
	var l nsListing
	if err := json.Unmarshal([]byte(body), &l); err != nil || code != http.StatusOK {
		t.Fatalf("GET /$namespaces = %d %s (%v)", code, body, err)
	}
	return l
}

// TestNamespaceDelete: a namespace made for a key name is listed and
// deleted over the admin API; its SDK connections are closed with
// not-found, its data directory is gone, and the next client with that
// key name gets a new namespace with the template's entities and no
// messages. Config.json's namespaces cannot be deleted.
func TestNamespaceDelete(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}`
	dir := t.TempDir()
	s := start(t, Options{Server: config.Server{DataDir: dir, NamespacePerKeyName: true}, Entities: loadConfig(t, cfg)})
	defer stop(t, s)
	run1, opts := nsConnectionString(s, "localhost", "run-1")
	if err := sendTo(t, run1, opts, "orders", "before"); err != nil {
		t.Fatal(err)
	}
	nsDir := filepath.Join(dir, "namespaces", "run-1")
	if _, err := os.Stat(nsDir); err != nil {
		t.Fatalf("run-1's data directory: %v", err)
	}

	l := listNamespaces(t, s)
	if len(l.Namespaces) != 2 || !l.Namespaces[0].Default || l.Namespaces[0].Origin != "config" || l.Namespaces[0].Name != "sbemulatorns" {
		t.Fatalf("listing %+v", l)
	}
	if e := l.Namespaces[1]; e.Name != "run-1" || e.Origin != "key-name" || e.Entities != 1 || e.DataDir != nsDir {
		t.Fatalf("run-1's entry %+v", e)
	}

	// A receiver holds a connection in run-1 while it is deleted.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(run1, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	rcv, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := rcv.PeekMessages(ctx, 10, nil); err != nil || len(msgs) != 1 {
		t.Fatalf("peek before the deletion: %d messages, %v", len(msgs), err)
	}

	code, body := adminJSON(t, s, http.MethodDelete, "/$namespaces/run-1", "")
	if code != http.StatusOK || !strings.Contains(body, `"name":"run-1"`) {
		t.Fatalf("DELETE /$namespaces/run-1 = %d %s", code, body)
	}
	if _, err := os.Stat(nsDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run-1's data directory after the deletion: %v", err)
	}
	// The open connection was closed with not-found: the SDK reports it
	// and does not reconnect into a new namespace behind the caller's back.
	_, err = rcv.ReceiveMessages(ctx, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "amqp:not-found") || !strings.Contains(err.Error(), "was deleted") {
		t.Fatalf("receive on the deleted namespace's connection: %v", err)
	}
	if l := listNamespaces(t, s); len(l.Namespaces) != 1 {
		t.Fatalf("listing after the deletion %+v", l)
	}

	// The same key name makes a new, empty namespace with the template.
	wantBodies(t, "run-1 again", peekAll(t, run1, opts, "orders"))
	if err := sendTo(t, run1, opts, "orders", "after"); err != nil {
		t.Fatal(err)
	}
	wantBodies(t, "run-1 again", peekAll(t, run1, opts, "orders"), "after")
	if l := listNamespaces(t, s); len(l.Namespaces) != 2 || l.Namespaces[1].Name != "run-1" {
		t.Fatalf("listing after the new run-1 %+v", l)
	}

	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/$namespaces/sbemulatorns", http.StatusBadRequest, "declared in Config.json"},
		{"/$namespaces/nope", http.StatusNotFound, "no namespace 'nope'"},
	} {
		if code, body := adminJSON(t, s, http.MethodDelete, c.path, ""); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("DELETE %s = %d %s, want %d with %q", c.path, code, body, c.code, c.want)
		}
	}
}

// TestNamespaceDeleteRacesNewConnections deletes a key name's namespace
// over and over while clients of that key name connect and send: every
// send either succeeds or fails cleanly, nothing leaks (goleak in
// TestMain), and the namespace works afterwards. Run with -race.
func TestNamespaceDeleteRacesNewConnections(t *testing.T) {
	cfg := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "orders"}]}]}}`
	s := start(t, Options{Server: config.Server{DataDir: t.TempDir(), NamespacePerKeyName: true}, Entities: loadConfig(t, cfg)})
	defer stop(t, s)
	cs, opts := nsConnectionString(s, "localhost", "racer")
	if err := sendTo(t, cs, opts, "orders", "first"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stopSending := make(chan struct{})
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stopSending:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{CustomEndpoint: opts.CustomEndpoint,
					RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
				if err == nil {
					if sender, err := client.NewSender("orders", nil); err == nil {
						_ = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprintf("%d-%d", i, j))}, nil)
					}
					_ = client.Close(ctx)
				}
				cancel()
			}
		}()
	}
	deleted := 0
	for range 5 {
		// Each round waits until the clients made the namespace again.
		eventually(t, "racer made again", func() bool { return s.ns.byKeyNameLoaded("racer") })
		code, body := adminJSON(t, s, http.MethodDelete, "/$namespaces/racer", "")
		switch code {
		case http.StatusOK:
			deleted++
		case http.StatusNotFound:
		default:
			t.Errorf("DELETE /$namespaces/racer = %d %s", code, body)
		}
	}
	if deleted == 0 {
		t.Error("no deletion succeeded")
	}
	close(stopSending)
	wg.Wait()
	if err := sendTo(t, cs, opts, "orders", "last"); err != nil {
		t.Fatalf("send after the races: %v", err)
	}
	if l := listNamespaces(t, s); len(l.Namespaces) != 2 {
		t.Fatalf("listing after the races %+v", l)
	}
}

// byKeyNameLoaded reports whether the namespace of that name is open.
func (r *nsRegistry) byKeyNameLoaded(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[strings.ToLower(name)] != nil
}
