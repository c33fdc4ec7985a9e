package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		on, err bool
	}{
		{name: "nothing set"},
		{name: "exporter otlp", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, on: true},
		{name: "endpoint", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, on: true},
		{name: "traces endpoint", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"}, on: true},
		{name: "exporter none wins", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}},
		{name: "sdk disabled", env: []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}},
		{name: "unsupported exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: true},
		{name: "grpc", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, err: true},
		{name: "traces protocol wins", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"}, on: true},
		{name: "protocol irrelevant when off", env: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, err := Enabled(env(tc.env...))
			if on != tc.on || (err != nil) != tc.err {
				t.Errorf("Enabled = %v, %v; want %v, error %v", on, err, tc.on, tc.err)
			}
		})
	}
}

func TestOffIsNil(t *testing.T) {
	p, err := Start(context.Background(), env(), "", nil)
	if err != nil || p != nil {
		t.Fatalf("Start with nothing set = %v, %v; want nil, nil", p, err)
	}
	if p.Tracer() != nil {
		t.Error("a nil provider has a tracer")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// Start and Shutdown leave no goroutine behind (goleak in TestMain), and
// Shutdown exports what was buffered.
func TestShutdownFlushes(t *testing.T) {
	var exports atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	p, err := Start(context.Background(), env("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL), "test", nil)
	if err != nil || p == nil {
		t.Fatalf("Start = %v, %v", p, err)
	}
	_, span := p.Tracer().Start(context.Background(), "x")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exports.Load() == 0 {
		t.Error("Shutdown exported nothing")
	}
}
