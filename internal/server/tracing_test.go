package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// collector is an in-process OTLP/HTTP trace receiver.
type collector struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	bad      []string
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					c.services = append(c.services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func TestTracesJoinTheMessagesTrace(t *testing.T) {
	col := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "busbar-under-test")

	s := start(t, Options{Server: config.Server{Memory: true}})
	stopped := false
	defer func() {
		if !stopped {
			stop(t, s)
		}
	}()
	if _, err := s.Broker().CreateQueue("traced", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}

	// The application's producer span, as the SDKs write it.
	traceID, _ := hex.DecodeString("4bf92f3577b34da6a3ce929d0e0e4736")
	producerSpan, _ := hex.DecodeString("00f067aa0ba902b7")
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// A second message carries its context in Diagnostic-Id only.
	diagTrace, _ := hex.DecodeString("0af7651916cd43dd8448eb211c80319c")
	diagSpan, _ := hex.DecodeString("b7ad6b7169203331")
	diagnosticID := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("traced", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("a"),
		ApplicationProperties: map[string]any{"traceparent": traceparent}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("b"),
		ApplicationProperties: map[string]any{"Diagnostic-Id": diagnosticID}}, nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("traced", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiver.PeekMessages(ctx, 1, nil); err != nil { // a management operation
		t.Fatal(err)
	}
	var got []*azservicebus.ReceivedMessage
	for len(got) < 2 {
		ms, err := receiver.ReceiveMessages(ctx, 2-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	for _, m := range got {
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown flushes the spans to the collector.
	stop(t, s)
	stopped = true

	col.mu.Lock()
	if len(col.bad) > 0 {
		t.Errorf("bad export requests: %v", col.bad)
	}
	for _, svc := range col.services {
		if svc != "busbar-under-test" {
			t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's busbar-under-test", svc)
		}
	}
	col.mu.Unlock()

	joins := func(name string, trace, parent []byte) *tracepb.Span {
		t.Helper()
		for _, sp := range col.named(name) {
			if bytes.Equal(sp.TraceId, trace) {
				if !bytes.Equal(sp.ParentSpanId, parent) {
					t.Errorf("%s span in the message's trace has parent %x, want %x", name, sp.ParentSpanId, parent)
				}
				return sp
			}
		}
		t.Errorf("no %s span in trace %x (of %d %s spans)", name, trace, len(col.named(name)), name)
		return nil
	}
	if sp := joins("busbar.send", traceID, producerSpan); sp != nil {
		if len(sp.Links) != 1 || !bytes.Equal(sp.Links[0].TraceId, traceID) || !bytes.Equal(sp.Links[0].SpanId, producerSpan) {
			t.Errorf("send span links = %v, want the message's context", sp.Links)
		}
		if attr(sp, "messaging.destination.name") != "traced" {
			t.Errorf("send span destination = %q", attr(sp, "messaging.destination.name"))
		}
		if sp.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("send span kind = %v", sp.Kind)
		}
	}
	joins("busbar.send", diagTrace, diagSpan)
	joins("busbar.deliver", traceID, producerSpan)
	joins("busbar.deliver", diagTrace, diagSpan)

	settles := col.named("busbar.settle")
	if len(settles) == 0 {
		t.Error("no busbar.settle span")
	}
	for _, sp := range settles {
		if attr(sp, "messaging.servicebus.disposition_status") != "completed" {
			t.Errorf("settle span disposition = %q, want completed", attr(sp, "messaging.servicebus.disposition_status"))
		}
	}
	peeked := false
	for _, sp := range col.named("busbar.management") {
		if attr(sp, "messaging.operation.name") == "com.microsoft:peek-message" {
			peeked = true
		}
	}
	if !peeked {
		t.Error("no busbar.management span for the peek")
	}
}

func TestTracingOffByDefault(t *testing.T) {
	col := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	s := start(t, Options{Server: config.Server{Memory: true}})
	if s.tracing != nil {
		t.Error("a tracer provider without any OTEL_* setting")
	}
	stop(t, s)

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.srv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	s = start(t, Options{Server: config.Server{Memory: true}})
	if s.tracing != nil {
		t.Error("a tracer provider with OTEL_TRACES_EXPORTER=none")
	}
	stop(t, s)
}

func TestTracingBadExporterFailsStart(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := Start(ctx, Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}}); err == nil {
		_ = s.Shutdown(ctx)
		t.Fatal("Start with OTEL_TRACES_EXPORTER=zipkin succeeded")
	}
}
