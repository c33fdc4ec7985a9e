package servicebus

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// Observer is told of connections and failed requests (metrics). Its
// methods are called on connection goroutines and must be fast.
type Observer interface {
	ConnectionOpened()
	ConnectionClosed()
	// RequestFailed: a request on entity ("" when none) failed and the
	// client was answered with cond and the management status code as
	// classify mapped the error.
	RequestFailed(entity, cond string, status int32)
}

type noObserver struct{}

func (noObserver) ConnectionOpened()                   {}
func (noObserver) ConnectionClosed()                   {}
func (noObserver) RequestFailed(string, string, int32) {}

// Tracing. With Config.Tracer set, the handler makes a span for every
// broker send (busbar.send), every message handed to a receiver
// (busbar.deliver), every settlement (busbar.settle) and every
// management operation (busbar.management). A message's own trace
// context is the one the SDKs put in its application properties:
// "traceparent" (W3C Trace Context) or, failing that, "Diagnostic-Id" when
// it holds a W3C traceparent (current SDKs; the older Request-Id form is
// ignored), with "tracestate". A deliver span is a child of its message's
// context, so the consumer's spans join the producer's trace through
// Busbar; a send span links every message's context, and is the child of
// it when the transfer carried one message.

var traceContext propagation.TraceContext

// appProps reads a trace context from application properties
// (propagation.TextMapCarrier; read-only).
type appProps map[string]any

func (p appProps) Get(key string) string {
	switch key {
	case "traceparent":
		if v, ok := p["traceparent"].(string); ok {
			return v
		}
		v, _ := p["Diagnostic-Id"].(string)
		return v
	case "tracestate":
		v, _ := p["tracestate"].(string)
		return v
	}
	return ""
}

func (appProps) Set(string, string) {}

func (p appProps) Keys() []string { return []string{"traceparent", "tracestate"} }

// messageSpanContext is the trace context a message carries; invalid if none.
func messageSpanContext(props map[string]any) trace.SpanContext {
	if len(props) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), appProps(props)))
}

func entityAttrs(entity, op string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "servicebus"),
		attribute.String("messaging.destination.name", entity),
		attribute.String("messaging.operation.name", op),
	}
}

// endSpan ends span, recording err. A nil span (tracing off) is fine.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceSend starts the span of one broker send of msgs to entity; nil
// when tracing is off.
func (h *Handler) traceSend(entity string, msgs []*message.Message) trace.Span {
	if h.tracer == nil {
		return nil
	}
	ctx := context.Background()
	var links []trace.Link
	for _, m := range msgs {
		if sc := messageSpanContext(m.ApplicationProperties); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if len(msgs) == 1 && len(links) == 1 {
		ctx = trace.ContextWithRemoteSpanContext(ctx, links[0].SpanContext)
	}
	_, span := h.tracer.Start(ctx, "busbar.send",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithLinks(links...),
		trace.WithAttributes(entityAttrs(entity, "send")...),
		trace.WithAttributes(attribute.Int("messaging.batch.message_count", len(msgs))))
	return span
}

// traceDeliver records that d was handed to a receiver of entity: a span
// whose parent is the message's trace context.
func (h *Handler) traceDeliver(entity string, d *broker.Delivery, err error) {
	if h.tracer == nil {
		return
	}
	ctx := context.Background()
	if sc := messageSpanContext(d.Message.ApplicationProperties); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := h.tracer.Start(ctx, "busbar.deliver",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(entityAttrs(entity, "deliver")...),
		trace.WithAttributes(
			attribute.Int64("messaging.servicebus.message.sequence_number", d.SequenceNumber),
			attribute.Int("messaging.servicebus.message.delivery_count", int(d.DeliveryCount))))
	if id := d.Message.MessageID; id != nil {
		if s, ok := id.(string); ok {
			span.SetAttributes(attribute.String("messaging.message.id", s))
		}
	}
	endSpan(span, err)
}

// traceSettle starts the span of a settlement of n messages of entity
// with outcome; nil when tracing is off.
func (h *Handler) traceSettle(entity, outcome string, n int) trace.Span {
	if h.tracer == nil {
		return nil
	}
	_, span := h.tracer.Start(context.Background(), "busbar.settle",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(entityAttrs(entity, "settle")...),
		trace.WithAttributes(
			attribute.String("messaging.servicebus.disposition_status", outcome),
			attribute.Int("messaging.batch.message_count", n)))
	return span
}

// traceManagement starts the span of a management operation on entity,
// a child of the request's trace context if it carries one; nil when
// tracing is off.
func (h *Handler) traceManagement(entity, op string, reqProps map[string]any) trace.Span {
	if h.tracer == nil {
		return nil
	}
	ctx := context.Background()
	if sc := messageSpanContext(reqProps); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := h.tracer.Start(ctx, "busbar.management",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(entityAttrs(entity, op)...))
	return span
}
