package admin

// The HTTP data plane's message format: how a message travels as an HTTP
// request or response (BrokerProperties header, custom-property headers,
// the body), and the batch format application/vnd.microsoft.servicebus.json.
// See dataplane.go for the endpoints.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// contentTypeBatch is the content type of a batch send.
const contentTypeBatch = "application/vnd.microsoft.servicebus.json"

// httpTime is the format of the times in BrokerProperties (RFC 1123, GMT).
const httpTime = http.TimeFormat

// sendProps are the BrokerProperties a sender may set. Read-only ones
// (SequenceNumber, LockToken, DeliveryCount, …) that a client echoes back
// are ignored, as are unknown ones.
type sendProps struct {
	MessageID               *string  `json:"MessageId"`
	CorrelationID           *string  `json:"CorrelationId"`
	SessionID               *string  `json:"SessionId"`
	Label                   *string  `json:"Label"`
	ReplyTo                 *string  `json:"ReplyTo"`
	ReplyToSessionID        *string  `json:"ReplyToSessionId"`
	To                      *string  `json:"To"`
	PartitionKey            *string  `json:"PartitionKey"`
	ContentType             *string  `json:"ContentType"`
	TimeToLive              *float64 `json:"TimeToLive"`         // seconds
	TimeToLiveTimeSpan      *string  `json:"TimeToLiveTimeSpan"` // .NET TimeSpan [d.]hh:mm:ss[.fffffff]
	ScheduledEnqueueTimeUtc *string  `json:"ScheduledEnqueueTimeUtc"`
}

// recvProps are the BrokerProperties of a received message, in the
// service's (alphabetical) order.
type recvProps struct {
	ContentType             string   `json:"ContentType,omitempty"`
	CorrelationID           string   `json:"CorrelationId,omitempty"`
	DeadLetterSource        string   `json:"DeadLetterSource,omitempty"`
	DeliveryCount           uint32   `json:"DeliveryCount"`
	EnqueuedTimeUtc         string   `json:"EnqueuedTimeUtc"`
	Label                   string   `json:"Label,omitempty"`
	LockToken               string   `json:"LockToken,omitempty"`
	LockedUntilUtc          string   `json:"LockedUntilUtc,omitempty"`
	MessageID               string   `json:"MessageId,omitempty"`
	PartitionKey            string   `json:"PartitionKey,omitempty"`
	ReplyTo                 string   `json:"ReplyTo,omitempty"`
	ReplyToSessionID        string   `json:"ReplyToSessionId,omitempty"`
	ScheduledEnqueueTimeUtc string   `json:"ScheduledEnqueueTimeUtc,omitempty"`
	SequenceNumber          int64    `json:"SequenceNumber"`
	SessionID               string   `json:"SessionId,omitempty"`
	State                   string   `json:"State"`
	TimeToLive              *float64 `json:"TimeToLive,omitempty"`
	To                      string   `json:"To,omitempty"`
}

// infiniteTTL is what the service reports as the TimeToLive of a message
// that never expires: TimeSpan.MaxValue in seconds.
const infiniteTTL = 922337203685.4775

// maxTTLSeconds bounds a TimeToLive a sender gives (TimeSpan.MaxValue).
const maxTTLSeconds = infiniteTTL

// parseBrokerProps reads a BrokerProperties JSON object into m. An empty
// header sets nothing.
func parseBrokerProps(raw string, m *message.Message) error {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil
	}
	var p sendProps
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&p); err != nil {
		return badRequest("The BrokerProperties header is not a JSON object of message properties: %v.", jsonErr(err))
	}
	if dec.More() {
		return badRequest("The BrokerProperties header holds more than one JSON value.")
	}
	return p.apply(m)
}

func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if e, ok := err.(*json.UnmarshalTypeError); ok {
		te = e
		return fmt.Sprintf("%s must be a JSON %s, not %s", te.Field, jsonKind(te.Type.String()), te.Value)
	}
	return err.Error()
}

func jsonKind(goType string) string {
	switch goType {
	case "float64":
		return "number"
	case "string":
		return "string"
	}
	return goType
}

// apply sets the properties p gives on m.
func (p *sendProps) apply(m *message.Message) error {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if p.MessageID != nil {
		m.MessageID = *p.MessageID
	}
	if p.CorrelationID != nil {
		m.CorrelationID = *p.CorrelationID
	}
	if p.SessionID != nil && *p.SessionID != "" { // "" is no session, as a REST client sends it
		m.SessionID = *p.SessionID
	}
	set(&m.Subject, p.Label)
	set(&m.ReplyTo, p.ReplyTo)
	set(&m.ReplyToSessionID, p.ReplyToSessionID)
	set(&m.To, p.To)
	set(&m.ContentType, p.ContentType)
	if p.PartitionKey != nil {
		annotate(m, "x-opt-partition-key", *p.PartitionKey)
	}
	switch {
	case p.TimeToLive != nil:
		s := *p.TimeToLive
		if !(s > 0) || s > maxTTLSeconds {
			return badRequest("BrokerProperties TimeToLive is %v; it must be a number of seconds above 0.", s)
		}
		m.TTL = ttlOf(s)
	case p.TimeToLiveTimeSpan != nil:
		d, err := parseTimeSpan(*p.TimeToLiveTimeSpan)
		if err != nil || d <= 0 {
			return badRequest("BrokerProperties TimeToLiveTimeSpan '%s' is not a positive time span [d.]hh:mm:ss[.fffffff].", *p.TimeToLiveTimeSpan)
		}
		m.TTL = d
	}
	if p.ScheduledEnqueueTimeUtc != nil {
		t, err := parseBrokerTime(*p.ScheduledEnqueueTimeUtc)
		if err != nil {
			return badRequest("BrokerProperties ScheduledEnqueueTimeUtc '%s' is not a time such as 'Mon, 02 Jan 2006 15:04:05 GMT'.", *p.ScheduledEnqueueTimeUtc)
		}
		annotate(m, broker.ScheduledEnqueueTimeAnnotation, t.UTC())
	}
	return nil
}

// ttlOf converts seconds to a duration, saturating.
func ttlOf(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

func annotate(m *message.Message, k string, v any) {
	if m.Annotations == nil {
		m.Annotations = map[string]any{}
	}
	m.Annotations[k] = v
}

// parseBrokerTime reads a time as RFC 1123 (the service's form) or RFC 3339.
func parseBrokerTime(s string) (time.Time, error) {
	if t, err := http.ParseTime(s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// parseTimeSpan reads a .NET TimeSpan: [-][d.]hh:mm:ss[.fffffff].
func parseTimeSpan(s string) (time.Duration, error) {
	bad := fmt.Errorf("bad time span %q", s)
	if s == "" || s[0] == '-' {
		return 0, bad
	}
	var days int64
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, bad
	}
	if d, h, ok := strings.Cut(parts[0], "."); ok {
		n, err := strconv.ParseInt(d, 10, 32)
		if err != nil {
			return 0, bad
		}
		days, parts[0] = n, h
	}
	hh, err1 := strconv.ParseUint(parts[0], 10, 8)
	mm, err2 := strconv.ParseUint(parts[1], 10, 8)
	sec, frac, _ := strings.Cut(parts[2], ".")
	ss, err3 := strconv.ParseUint(sec, 10, 8)
	if err1 != nil || err2 != nil || err3 != nil || hh > 23 || mm > 59 || ss > 59 || days > 10675199 {
		return 0, bad
	}
	var ns int64
	if frac != "" {
		if len(frac) > 7 {
			return 0, bad
		}
		f, err := strconv.ParseUint(frac, 10, 32)
		if err != nil {
			return 0, bad
		}
		ns = int64(f) * int64(math.Pow10(9-len(frac)))
	}
	total := time.Duration(days)*24*time.Hour + time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute + time.Duration(ss)*time.Second + time.Duration(ns)
	return total, nil
}

// standardHeaders are request headers that are never custom properties.
var standardHeaders = map[string]bool{
	"Accept": true, "Accept-Charset": true, "Accept-Encoding": true, "Accept-Language": true,
	"Authorization": true, "Brokerproperties": true, "Cache-Control": true, "Connection": true,
	"Content-Encoding": true, "Content-Length": true, "Content-Type": true, "Cookie": true,
	"Date": true, "Expect": true, "Forwarded": true, "Host": true, "Keep-Alive": true,
	"Origin": true, "Pragma": true, "Proxy-Authorization": true, "Proxy-Connection": true,
	"Referer": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"User-Agent": true, "Via": true, "Traceparent": true, "Tracestate": true,
	"Servicebussupplementaryauthorization":    true,
	"Servicebusdlqsupplementaryauthorization": true,
}

// isCustomHeader reports whether a (canonical) request header name is a
// custom property: not a standard HTTP header, not BrokerProperties, not
// x-ms-*, x-forwarded-* or sec-*.
func isCustomHeader(name string) bool {
	if standardHeaders[name] {
		return false
	}
	l := strings.ToLower(name)
	return !strings.HasPrefix(l, "x-ms-") && !strings.HasPrefix(l, "x-forwarded-") && !strings.HasPrefix(l, "sec-") && !strings.HasPrefix(l, "if-")
}

// maxCustomProps bounds the custom properties of one message.
const maxCustomProps = 256

// customProps reads the custom-property headers of a request.
func customProps(hdr http.Header) (map[string]any, error) {
	var props map[string]any
	for name, vs := range hdr {
		if !isCustomHeader(name) || len(vs) == 0 {
			continue
		}
		if props == nil {
			props = map[string]any{}
		}
		if len(props) == maxCustomProps {
			return nil, badRequest("The request carries more than %d custom-property headers.", maxCustomProps)
		}
		props[name] = parsePropValue(vs[0])
	}
	return props, nil
}

// parsePropValue reads a custom property's value: a JSON string in double
// quotes is a string, an integer an int64 (a float64 if it does not fit),
// a decimal number a float64, true and false booleans; anything else is the
// text as it is, a string.
func parsePropValue(v string) any {
	v = strings.TrimSpace(v)
	switch {
	case v == "true":
		return true
	case v == "false":
		return false
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
		var s string
		if json.Unmarshal([]byte(v), &s) == nil {
			return s
		}
		return v[1 : len(v)-1]
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if looksNumeric(v) {
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) {
			return f
		}
	}
	return v
}

// looksNumeric is true for a JSON-style number (no hex, Inf, NaN, '_').
func looksNumeric(v string) bool {
	if v == "" {
		return false
	}
	for i, c := range v {
		switch {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E':
		case (c == '-' || c == '+') && (i == 0 || v[i-1] == 'e' || v[i-1] == 'E'):
		default:
			return false
		}
	}
	return true
}

// formatPropValue writes a property value as a header value: strings (and
// ids, times, anything else) in JSON double quotes, numbers and booleans
// bare, as the service writes them.
func formatPropValue(v any) string {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x)
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return quote(fmt.Sprint(x))
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return quote(x.UTC().Format(httpTime))
	}
	return quote(message.IDText(v))
}

// quote is s as a JSON string, without HTML escaping; it never holds a
// CR or LF, so it is a safe header value.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// validHeaderName reports whether s can be an HTTP header name (an RFC
// 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// brokerPropsOf renders a delivery's BrokerProperties header.
func brokerPropsOf(d *broker.Delivery, locked bool) string {
	m := d.Message
	p := recvProps{
		ContentType:      m.ContentType,
		CorrelationID:    message.IDText(m.CorrelationID),
		DeadLetterSource: d.DeadLetterSource,
		DeliveryCount:    d.DeliveryCount,
		EnqueuedTimeUtc:  d.EnqueuedTime.UTC().Format(httpTime),
		Label:            m.Subject,
		MessageID:        message.IDText(m.MessageID),
		ReplyTo:          m.ReplyTo,
		ReplyToSessionID: m.ReplyToSessionID,
		SequenceNumber:   d.SequenceNumber,
		SessionID:        m.SessionID,
		State:            d.State.String(),
		To:               m.To,
	}
	if pk, ok := m.Annotations["x-opt-partition-key"].(string); ok {
		p.PartitionKey = pk
	}
	if locked {
		p.LockToken = d.LockToken.String()
		p.LockedUntilUtc = d.LockedUntil.UTC().Format(httpTime)
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		p.ScheduledEnqueueTimeUtc = d.ScheduledEnqueueTime.UTC().Format(httpTime)
	}
	ttl := infiniteTTL
	if d.TimeToLive > 0 && d.TimeToLive < time.Duration(math.MaxInt64) {
		ttl = d.TimeToLive.Seconds()
	}
	p.TimeToLive = &ttl
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
	return strings.TrimSuffix(b.String(), "\n")
}

// setPropHeaders writes m's application properties as response headers,
// skipping names that cannot be header names or that would collide with
// a header the response itself uses.
func setPropHeaders(h http.Header, props map[string]any) {
	for k, v := range props {
		if !validHeaderName(k) || !isCustomHeader(http.CanonicalHeaderKey(k)) || reservedResponseHeader(k) {
			continue
		}
		h[k] = []string{formatPropValue(v)}
	}
}

func reservedResponseHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Location", "Server", "Set-Cookie", "Www-Authenticate", "Allow", "Content-Disposition", "Content-Range", "Last-Modified", "Etag", "Retry-After", "Vary", "Age", "Expires":
		return true
	}
	return false
}

// batchEntry is one message of a batch send.
type batchEntry struct {
	Body             *string         `json:"Body"`
	BrokerProperties json.RawMessage `json:"BrokerProperties"`
	UserProperties   map[string]any  `json:"UserProperties"`
}

// parseBatch reads a batch send body into messages (at most max of them).
func parseBatch(body []byte, max int) ([]*message.Message, error) {
	var entries []batchEntry
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&entries); err != nil {
		return nil, badRequest("The batch is not a JSON array of messages {\"Body\": …, \"BrokerProperties\": {…}, \"UserProperties\": {…}}: %v.", jsonErr(err))
	}
	if dec.More() {
		return nil, badRequest("The batch holds more than one JSON value.")
	}
	if len(entries) == 0 {
		return nil, badRequest("The batch holds no messages.")
	}
	if len(entries) > max {
		return nil, badRequest("The batch holds %d messages, over the limit of %d.", len(entries), max)
	}
	msgs := make([]*message.Message, 0, len(entries))
	for i, e := range entries {
		var body []byte
		if e.Body != nil {
			body = []byte(*e.Body)
		}
		m := &message.Message{Body: encodeDataBody(body)}
		if len(e.BrokerProperties) > 0 && string(e.BrokerProperties) != "null" {
			if err := parseBrokerProps(string(e.BrokerProperties), m); err != nil {
				return nil, badRequest("Message %d of the batch: %s", i, err.Error())
			}
		}
		if len(e.UserProperties) > maxCustomProps {
			return nil, badRequest("Message %d of the batch has more than %d UserProperties.", i, maxCustomProps)
		}
		for k, v := range e.UserProperties {
			pv, err := userPropValue(v)
			if err != nil {
				return nil, badRequest("Message %d of the batch: UserProperties '%s': %v.", i, k, err)
			}
			if m.ApplicationProperties == nil {
				m.ApplicationProperties = map[string]any{}
			}
			m.ApplicationProperties[k] = pv
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// userPropValue converts a JSON value of UserProperties into a property
// value: strings, booleans, numbers (int64 if integral and in range,
// otherwise float64) and null.
func userPropValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, string, bool:
		return x, nil
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("%s is out of range", x)
		}
		return f, nil
	}
	return nil, fmt.Errorf("a property value must be a string, number, boolean or null, not %T", v)
}

// AMQP body encoding. A message's Body is its encoded AMQP body sections
// (package message). The HTTP data plane sends its payload as one data
// section and reads a body back as bytes:
//
//	data section       0x00 0x53 0x75 (0xa0 len:u8 | 0xb0 len:u32) bytes
//	amqp-value         0x00 0x53 0x77 value   (a string or binary value)
//	(the descriptor may also be 0x80 followed by the code as a u64)
//
// Several data sections are concatenated. Any other body (an
// amqp-sequence, a value of another type) is returned as its raw AMQP
// encoding, with ok false.

const (
	descData  = 0x75
	descValue = 0x77
)

// encodeDataBody encodes p as one AMQP data section.
func encodeDataBody(p []byte) []byte {
	out := make([]byte, 0, len(p)+8)
	out = append(out, 0x00, 0x53, descData)
	if len(p) <= math.MaxUint8 {
		out = append(out, 0xa0, byte(len(p)))
	} else {
		out = append(out, 0xb0)
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
	}
	return append(out, p...)
}

// decodeAMQPBody returns the payload of an encoded body: the concatenated data
// sections, or an amqp-value string or binary. ok is false (and payload the
// raw bytes) for anything else.
func decodeAMQPBody(raw []byte) (payload []byte, ok bool) {
	if len(raw) == 0 {
		return nil, true
	}
	var out []byte
	rest := raw
	sawValue := false
	for len(rest) > 0 {
		code, n := sectionDescriptor(rest)
		if n == 0 || sawValue {
			return raw, false
		}
		rest = rest[n:]
		switch code {
		case descData:
			b, n := binaryValue(rest, false)
			if n == 0 {
				return raw, false
			}
			out = append(out, b...)
			rest = rest[n:]
		case descValue:
			if out != nil {
				return raw, false
			}
			b, n := binaryValue(rest, true)
			if n == 0 {
				return raw, false
			}
			out = append([]byte{}, b...)
			rest = rest[n:]
			sawValue = true
		default:
			return raw, false
		}
	}
	if out == nil {
		out = []byte{}
	}
	return out, true
}

// sectionDescriptor reads a section's descriptor: its code and the bytes
// it took, 0 if it is not one.
func sectionDescriptor(b []byte) (uint64, int) {
	if len(b) >= 3 && b[0] == 0x00 && b[1] == 0x53 {
		return uint64(b[2]), 3
	}
	if len(b) >= 10 && b[0] == 0x00 && b[1] == 0x80 {
		return binary.BigEndian.Uint64(b[2:10]), 10
	}
	return 0, 0
}

// binaryValue reads a vbin8/vbin32 (and, if str, a str8/str32) value: its
// bytes and the bytes it took, 0 if it is not one.
func binaryValue(b []byte, str bool) ([]byte, int) {
	if len(b) < 2 {
		return nil, 0
	}
	switch c := b[0]; {
	case c == 0xa0 || (str && c == 0xa1):
		n := int(b[1])
		if len(b) < 2+n {
			return nil, 0
		}
		return b[2 : 2+n], 2 + n
	case c == 0xb0 || (str && c == 0xb1):
		if len(b) < 5 {
			return nil, 0
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint64(len(b)-5) < uint64(n) {
			return nil, 0
		}
		return b[5 : 5+int(n)], 5 + int(n)
	}
	return nil, 0
}
