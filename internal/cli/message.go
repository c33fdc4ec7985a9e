package cli

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/filter"
	"github.com/busbarmq/busbar/internal/message"
)

// jsonMessage is a message in JSON: what peek and receive print with --json
// and, one per line, what send --jsonl reads. The fields marked output-only
// are accepted and ignored on input, so printed messages can be sent again.
type jsonMessage struct {
	// Output only.
	SequenceNumber             *int64     `json:"sequenceNumber,omitempty"`
	EnqueuedTime               *time.Time `json:"enqueuedTime,omitempty"`
	ExpiresAt                  *time.Time `json:"expiresAt,omitempty"`
	LockedUntil                *time.Time `json:"lockedUntil,omitempty"`
	DeliveryCount              *uint32    `json:"deliveryCount,omitempty"`
	State                      string     `json:"state,omitempty"`
	DeadLetterReason           *string    `json:"deadLetterReason,omitempty"`
	DeadLetterErrorDescription *string    `json:"deadLetterErrorDescription,omitempty"`
	DeadLetterSource           *string    `json:"deadLetterSource,omitempty"`
	Settled                    string     `json:"settled,omitempty"` // receive: what was done with it
	BodyValue                  any        `json:"bodyValue,omitempty"`

	// Input and output.
	MessageID            *string        `json:"messageId,omitempty"`
	CorrelationID        *string        `json:"correlationId,omitempty"`
	SessionID            *string        `json:"sessionId,omitempty"`
	Subject              *string        `json:"subject,omitempty"`
	ContentType          *string        `json:"contentType,omitempty"`
	To                   *string        `json:"to,omitempty"`
	ReplyTo              *string        `json:"replyTo,omitempty"`
	ReplyToSessionID     *string        `json:"replyToSessionId,omitempty"`
	PartitionKey         *string        `json:"partitionKey,omitempty"`
	TimeToLive           *string        `json:"timeToLive,omitempty"`
	ScheduledEnqueueTime *time.Time     `json:"scheduledEnqueueTime,omitempty"`
	Properties           map[string]any `json:"properties,omitempty"`
	// Body is a JSON string for a text body; on input, any other JSON
	// value is sent as its JSON text. BodyBase64 is a binary body.
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBase64 []byte          `json:"bodyBase64,omitempty"`
}

// toJSONMessage converts a received or peeked message.
func toJSONMessage(m *azservicebus.ReceivedMessage) jsonMessage {
	j := jsonMessage{
		SequenceNumber:             m.SequenceNumber,
		EnqueuedTime:               m.EnqueuedTime,
		ExpiresAt:                  m.ExpiresAt,
		LockedUntil:                m.LockedUntil,
		DeadLetterReason:           m.DeadLetterReason,
		DeadLetterErrorDescription: m.DeadLetterErrorDescription,
		DeadLetterSource:           m.DeadLetterSource,
		State:                      stateName(m.State),
		CorrelationID:              m.CorrelationID,
		SessionID:                  m.SessionID,
		Subject:                    m.Subject,
		ContentType:                m.ContentType,
		To:                         m.To,
		ReplyTo:                    m.ReplyTo,
		ReplyToSessionID:           m.ReplyToSessionID,
		PartitionKey:               m.PartitionKey,
		ScheduledEnqueueTime:       m.ScheduledEnqueueTime,
	}
	dc := m.DeliveryCount
	j.DeliveryCount = &dc
	if m.MessageID != "" {
		id := m.MessageID
		j.MessageID = &id
	}
	// The SDK shows only string ids; show the others (uuid, ulong, binary)
	// as the rule language reads them.
	if raw := m.RawAMQPMessage; raw != nil && raw.Properties != nil {
		if j.MessageID == nil {
			j.MessageID = idText(raw.Properties.MessageID)
		}
		if j.CorrelationID == nil {
			j.CorrelationID = idText(raw.Properties.CorrelationID)
		}
	}
	// The SDK reports a TTL of 0, and an expiry at the enqueued time, for
	// a message whose header has no ttl: that means none was set.
	if m.TimeToLive != nil && *m.TimeToLive > 0 {
		s := humanDuration(*m.TimeToLive)
		j.TimeToLive = &s
	} else {
		j.ExpiresAt = nil
	}
	if len(m.ApplicationProperties) > 0 {
		j.Properties = make(map[string]any, len(m.ApplicationProperties))
		for k, v := range m.ApplicationProperties {
			j.Properties[k] = jsonValue(v)
		}
	}
	body := m.Body
	if raw := m.RawAMQPMessage; raw != nil {
		switch {
		case len(raw.Body.Data) > 1:
			body = bytes.Join(raw.Body.Data, nil)
		case raw.Body.Value != nil:
			j.BodyValue = jsonValue(raw.Body.Value)
		case raw.Body.Sequence != nil:
			j.BodyValue = jsonValue(raw.Body.Sequence)
		}
	}
	if body != nil {
		if isText(body) {
			j.Body, _ = json.Marshal(string(body))
		} else {
			j.BodyBase64 = body
		}
	}
	return j
}

func stateName(s azservicebus.MessageState) string {
	switch s {
	case azservicebus.MessageStateActive:
		return "Active"
	case azservicebus.MessageStateDeferred:
		return "Deferred"
	case azservicebus.MessageStateScheduled:
		return "Scheduled"
	}
	return fmt.Sprint(int32(s))
}

// jsonValue makes an AMQP value JSON-friendly: UUIDs as text, symbols as
// strings, binary as base64 (by encoding/json), containers recursively.
func jsonValue(v any) any {
	switch x := v.(type) {
	case amqp.UUID:
		return x.String()
	case amqp.Symbol:
		return string(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Sprint(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case [][]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(jsonValue(k))] = jsonValue(e)
		}
		return out
	}
	return v
}

// decodeJSONMessage reads one --jsonl line.
func decodeJSONMessage(line []byte) (*jsonMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var j jsonMessage
	if err := dec.Decode(&j); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value on the line")
	}
	return &j, nil
}

// toMessage builds the message to send from a decoded --jsonl line.
func (j *jsonMessage) toMessage() (*azservicebus.Message, error) {
	m := &azservicebus.Message{
		MessageID:            j.MessageID,
		CorrelationID:        j.CorrelationID,
		SessionID:            j.SessionID,
		Subject:              j.Subject,
		ContentType:          j.ContentType,
		To:                   j.To,
		ReplyTo:              j.ReplyTo,
		ReplyToSessionID:     j.ReplyToSessionID,
		PartitionKey:         j.PartitionKey,
		ScheduledEnqueueTime: j.ScheduledEnqueueTime,
	}
	if j.TimeToLive != nil {
		d, err := parseDuration(*j.TimeToLive)
		if err != nil {
			return nil, fmt.Errorf("timeToLive: %v", err)
		}
		m.TimeToLive = &d
	}
	switch {
	case j.BodyValue != nil:
		return nil, errors.New("bodyValue (an AMQP value or sequence body) cannot be sent; use body or bodyBase64")
	case len(j.Body) > 0 && j.BodyBase64 != nil:
		return nil, errors.New("both body and bodyBase64 given")
	case j.BodyBase64 != nil:
		m.Body = j.BodyBase64
	case len(j.Body) > 0 && j.Body[0] == '"':
		var s string
		if err := json.Unmarshal(j.Body, &s); err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
		m.Body = []byte(s)
	case len(j.Body) > 0 && !bytes.Equal(j.Body, []byte("null")):
		var buf bytes.Buffer
		if err := json.Compact(&buf, j.Body); err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
		m.Body = buf.Bytes()
	}
	if len(j.Properties) > 0 {
		m.ApplicationProperties = make(map[string]any, len(j.Properties))
		for k, v := range j.Properties {
			pv, err := propertyFromJSON(v)
			if err != nil {
				return nil, fmt.Errorf("properties.%s: %v", k, err)
			}
			m.ApplicationProperties[k] = pv
		}
	}
	return m, nil
}

// propertyFromJSON converts a JSON property value (decoded with UseNumber)
// to an AMQP one: integers to int64, other numbers to float64.
func propertyFromJSON(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s out of range", x)
		}
		return f, nil
	case string, bool, nil:
		return x, nil
	}
	return nil, errors.New("application properties must be strings, numbers, booleans or null")
}

// filterEnv builds what a SQL filter is evaluated against from a received
// message: its AMQP sections as the sender supplied them, and the broker's
// system values.
func filterEnv(m *azservicebus.ReceivedMessage) *filter.Env {
	msg := &message.Message{}
	if raw := m.RawAMQPMessage; raw != nil {
		if h := raw.Header; h != nil {
			msg.Durable, msg.Priority, msg.TTL = h.Durable, h.Priority, h.TTL
		}
		if p := raw.Properties; p != nil {
			msg.MessageID = messageValue(p.MessageID)
			msg.CorrelationID = messageValue(p.CorrelationID)
			msg.UserID = p.UserID
			msg.To = optStr(p.To)
			msg.Subject = optStr(p.Subject)
			msg.ReplyTo = optStr(p.ReplyTo)
			msg.ContentType = optStr(p.ContentType)
			msg.ContentEncoding = optStr(p.ContentEncoding)
			msg.SessionID = optStr(p.GroupID)
			msg.ReplyToSessionID = optStr(p.ReplyToGroupID)
			if p.AbsoluteExpiryTime != nil {
				msg.AbsoluteExpiryTime = *p.AbsoluteExpiryTime
			}
			if p.CreationTime != nil {
				msg.CreationTime = *p.CreationTime
			}
		}
		if len(raw.MessageAnnotations) > 0 {
			msg.Annotations = make(map[string]any, len(raw.MessageAnnotations))
			for k, v := range raw.MessageAnnotations {
				if name, ok := annotationKey(k); ok {
					msg.Annotations[name] = messageValue(v)
				}
			}
		}
		if len(raw.ApplicationProperties) > 0 {
			msg.ApplicationProperties = make(map[string]any, len(raw.ApplicationProperties))
			for k, v := range raw.ApplicationProperties {
				msg.ApplicationProperties[k] = messageValue(v)
			}
		}
	}
	env := &filter.Env{Msg: msg}
	s := &env.Sys
	if m.SequenceNumber != nil {
		s.SequenceNumber = *m.SequenceNumber
	}
	if m.EnqueuedSequenceNumber != nil {
		s.EnqueuedSequenceNumber = *m.EnqueuedSequenceNumber
	}
	if m.EnqueuedTime != nil {
		s.EnqueuedTime = *m.EnqueuedTime
	}
	if m.ScheduledEnqueueTime != nil {
		s.ScheduledEnqueueTime = *m.ScheduledEnqueueTime
	}
	if m.ExpiresAt != nil {
		s.ExpiresAt = *m.ExpiresAt
	}
	if m.TimeToLive != nil {
		s.TimeToLive = *m.TimeToLive
	}
	if m.LockedUntil != nil {
		s.LockedUntil = *m.LockedUntil
	}
	s.LockToken = message.UUID(m.LockToken)
	s.DeliveryCount = int32(min(m.DeliveryCount, math.MaxInt32))
	s.DeadLetterSource = optStr(m.DeadLetterSource)
	s.Size = int64(len(m.Body))
	switch m.State {
	case azservicebus.MessageStateDeferred:
		s.State = filter.StateDeferred
	case azservicebus.MessageStateScheduled:
		s.State = filter.StateScheduled
	}
	return env
}

// messageValue converts go-amqp's value types to package message's.
func messageValue(v any) any {
	switch x := v.(type) {
	case amqp.UUID:
		return message.UUID(x)
	case amqp.Symbol:
		return message.Symbol(x)
	}
	return v
}

// idText shows a MessageId or CorrelationId of a type other than string:
// a uuid in its usual form, a ulong in decimal, binary in hex.
func idText(id any) *string {
	var s string
	switch x := id.(type) {
	case amqp.UUID:
		s = x.String()
	case uint64:
		s = fmt.Sprint(x)
	case []byte:
		s = hex.EncodeToString(x)
	case string:
		s = x
	default:
		return nil
	}
	return &s
}

// annotationKey is the name of a message-annotation key (a symbol).
func annotationKey(k any) (string, bool) {
	switch x := k.(type) {
	case amqp.Symbol:
		return string(x), true
	case string:
		return x, true
	}
	return "", false
}

// printMessages writes messages as a table or, with asJSON, a JSON array.
// dlq adds the dead-letter reason; messages that were settled show how.
func printMessages(cmd *cobra.Command, msgs []jsonMessage, asJSON bool, dlq bool) error {
	w := cmd.OutOrStdout()
	if asJSON {
		if msgs == nil {
			msgs = []jsonMessage{}
		}
		return writeJSON(w, msgs)
	}
	if len(msgs) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no messages")
		return nil
	}
	settled := msgs[0].Settled != ""
	header := []string{"SEQ"}
	if settled {
		header = append(header, "SETTLED")
	}
	header = append(header, "ENQUEUED", "STATE", "DELIVERIES", "MESSAGE ID", "SUBJECT")
	if dlq {
		header = append(header, "REASON")
	}
	header = append(header, "PROPERTIES", "BODY")
	t := newTable(w, header...)
	for _, m := range msgs {
		row := []string{optInt(m.SequenceNumber)}
		if settled {
			row = append(row, cell(m.Settled, 0))
		}
		row = append(row, timeCell(m.EnqueuedTime), cell(m.State, 0),
			fmt.Sprint(*m.DeliveryCount), cell(optStr(m.MessageID), 40), cell(optStr(m.Subject), 30))
		if dlq {
			row = append(row, cell(optStr(m.DeadLetterReason), 40))
		}
		row = append(row, propertiesCell(m.Properties, dlq), messageBodyCell(m))
		t.row(row...)
	}
	return t.flush()
}

// propertiesCell shows application properties as k=v pairs, sorted,
// leaving out the dead-letter ones shown in their own column.
func propertiesCell(p map[string]any, dlq bool) string {
	var parts []string
	for _, k := range sortedKeys(p) {
		if dlq && (k == "DeadLetterReason" || k == "DeadLetterErrorDescription") {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, p[k]))
	}
	return cell(strings.Join(parts, " "), 50)
}

func messageBodyCell(m jsonMessage) string {
	switch {
	case m.BodyBase64 != nil:
		return bodyCell(m.BodyBase64, 60)
	case m.Body != nil:
		var s string
		_ = json.Unmarshal(m.Body, &s)
		return bodyCell([]byte(s), 60)
	case m.BodyValue != nil:
		b, _ := json.Marshal(m.BodyValue)
		return cell("(amqp-value) "+string(b), 60)
	}
	return "-"
}

// isText reports whether a body reads as text: UTF-8 without control
// characters other than tab, newline and carriage return.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
			return false
		}
	}
	return true
}
