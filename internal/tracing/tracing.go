// Package tracing sets up Busbar's OpenTelemetry tracing from the standard
// OTEL_* environment variables. It is off by default. It is on when
//
//	OTEL_TRACES_EXPORTER=otlp, or
//	OTEL_TRACES_EXPORTER is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
//
// and OTEL_SDK_DISABLED is not true. OTEL_TRACES_EXPORTER=none turns it
// off; any other exporter, and an OTLP protocol other than http/protobuf
// (OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL), is an
// error at start-up rather than silently no traces. Spans are batched and
// exported over OTLP/HTTP (protobuf); the exporter and the SDK read the
// rest of the standard variables themselves: endpoint, headers, timeout,
// compression, certificates (OTEL_EXPORTER_OTLP_*), the sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), the batch processor
// (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME, default "busbar";
// OTEL_RESOURCE_ATTRIBUTES).
//
// The spans themselves are made where the work is (package servicebus);
// this package only owns the provider: Start makes it, Shutdown flushes
// and stops it (the batch processor's goroutine and the exporter's
// connections).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Provider is Busbar's tracer provider; a nil *Provider is tracing off.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Enabled reports whether the environment turns tracing on (see the
// package documentation). lookup is os.LookupEnv in production.
func Enabled(lookup func(string) (string, bool)) (bool, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	if v := get("OTEL_SDK_DISABLED"); v != "" {
		if off, err := strconv.ParseBool(v); err == nil && off {
			return false, nil
		}
	}
	on := false
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: Busbar exports traces only with otlp (or none)", exp)
	}
	if !on {
		return false, nil
	}
	proto := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("OTLP protocol %q: Busbar exports traces only over http/protobuf", proto)
	}
	return true, nil
}

// Start returns the provider the environment asks for: nil (tracing off)
// unless Enabled says on. The exporter and SDK read the process
// environment (os.Getenv) for the rest of their settings. version is
// recorded as service.version when not empty; log receives the SDK's
// export errors.
func Start(ctx context.Context, lookup func(string) (string, bool), version string, log *slog.Logger) (*Provider, error) {
	on, err := Enabled(lookup)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "busbar")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	if log != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing", "err", err)
		}))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp}, nil
}

// Tracer is Busbar's tracer; nil when tracing is off.
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer("github.com/busbarmq/busbar")
}

// Shutdown exports the spans still buffered and stops the provider,
// waiting at most until ctx is done. A nil provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}
