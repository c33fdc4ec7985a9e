package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// POST /$rules/dry-run: which subscriptions of a topic would take a
// message, by which rules, with what the actions would set, and why the
// others would not (broker.DryRun). Nothing is stored. It needs Manage,
// as every request of this API: it shows the topic's rules.
//
//	{"topic": "events",
//	 "message": {"body": "…", "properties": {"region": "eu", "n": 3},
//	             "subject": "…", "correlationId": "…", "messageId": "…",
//	             "to": "…", "replyTo": "…", "sessionId": "…",
//	             "replyToSessionId": "…", "contentType": "…",
//	             "timeToLive": "10m"}}
//
// Property values are JSON strings, booleans and numbers (a whole number
// is a long, any other a double), as a filter sees them.

type dryRunRequest struct {
	Topic   string        `json:"topic"`
	Message dryRunMessage `json:"message"`
}

type dryRunMessage struct {
	Body             string                     `json:"body"`
	Properties       map[string]json.RawMessage `json:"properties"`
	Subject          string                     `json:"subject"`
	CorrelationID    string                     `json:"correlationId"`
	MessageID        string                     `json:"messageId"`
	To               string                     `json:"to"`
	ReplyTo          string                     `json:"replyTo"`
	SessionID        string                     `json:"sessionId"`
	ReplyToSessionID string                     `json:"replyToSessionId"`
	ContentType      string                     `json:"contentType"`
	TimeToLive       string                     `json:"timeToLive"`
}

// maxDryRunProperties bounds the properties of a dry-run message.
const maxDryRunProperties = 256

func (m *dryRunMessage) message() (*message.Message, error) {
	out := &message.Message{Body: []byte(m.Body), Subject: m.Subject, To: m.To, ReplyTo: m.ReplyTo,
		SessionID: m.SessionID, ReplyToSessionID: m.ReplyToSessionID, ContentType: m.ContentType}
	if m.CorrelationID != "" {
		out.CorrelationID = m.CorrelationID
	}
	if m.MessageID != "" {
		out.MessageID = m.MessageID
	}
	if m.TimeToLive != "" {
		d, err := time.ParseDuration(m.TimeToLive)
		if err != nil || d <= 0 {
			return nil, badRequest("message.timeToLive %q is not a positive duration (such as 10m).", m.TimeToLive)
		}
		out.TTL = d
	}
	if len(m.Properties) > maxDryRunProperties {
		return nil, badRequest("The message has %d properties; a dry-run takes at most %d.", len(m.Properties), maxDryRunProperties)
	}
	if len(m.Properties) > 0 {
		out.ApplicationProperties = make(map[string]any, len(m.Properties))
	}
	for k, raw := range m.Properties {
		v, err := propertyValue(raw)
		if err != nil {
			return nil, badRequest("message.properties.%s: %v", k, err)
		}
		out.ApplicationProperties[k] = v
	}
	return out, nil
}

// propertyValue reads one JSON property value: string, bool, or number
// (int64 when whole, else float64).
func propertyValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch v.(type) {
	case string, bool, json.Number:
		return userPropValue(v) // as the data plane reads a custom property
	}
	return nil, errorf(http.StatusBadRequest, "a property value is a string, a number or a boolean")
}

type dryRunResponse struct {
	Topic         string            `json:"topic"`
	Accepted      []string          `json:"accepted"`     // subscriptions that get the message
	DeadLettered  []string          `json:"deadLettered"` // subscriptions that would dead-letter it
	Subscriptions []dryRunSubscript `json:"subscriptions"`
}

type dryRunSubscript struct {
	Name                  string       `json:"name"`
	Accepted              bool         `json:"accepted"`
	Copies                int          `json:"copies,omitempty"`
	DeadLettered          bool         `json:"deadLettered,omitempty"`
	DeadLetterReason      string       `json:"deadLetterReason,omitempty"`
	DeadLetterDescription string       `json:"deadLetterDescription,omitempty"`
	Inactive              bool         `json:"inactive,omitempty"`
	Reason                string       `json:"reason"`
	Rules                 []dryRunRule `json:"rules"`
}

type dryRunRule struct {
	Name    string         `json:"name"`
	Filter  string         `json:"filter"`
	Action  string         `json:"action,omitempty"`
	Matched bool           `json:"matched"`
	Why     string         `json:"why,omitempty"`
	Error   string         `json:"error,omitempty"`
	Sets    map[string]any `json:"sets,omitempty"`
	Removes []string       `json:"removes,omitempty"`
}

func dryRun(h *Handler, rq *request) (*reply, error) {
	var req dryRunRequest
	var raw bytes.Buffer // the body, for a topic another node serves
	body := rq.r.Body
	rq.r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(body, &raw), body}
	if err := readJSON(rq.r, &req); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Topic) == "" {
		return nil, badRequest("The dry-run names no topic: send {\"topic\": …, \"message\": {…}}.")
	}
	rq.r.Body, rq.r.ContentLength = io.NopCloser(bytes.NewReader(raw.Bytes())), int64(raw.Len())
	if rep, ok, err := h.forward(rq, unitOf(req.Topic)); ok {
		return rep, err
	}
	m, err := req.Message.message()
	if err != nil {
		return nil, err
	}
	dr, err := h.broker.DryRun(req.Topic, m)
	if err != nil {
		return nil, err
	}
	return jsonReply(http.StatusOK, dryRunJSON(dr))
}

func dryRunJSON(dr broker.DryRun) dryRunResponse {
	out := dryRunResponse{Topic: dr.Topic, Accepted: []string{}, DeadLettered: []string{}, Subscriptions: []dryRunSubscript{}}
	for _, s := range dr.Subscriptions {
		js := dryRunSubscript{Name: s.Name, Accepted: s.Accepted, Copies: s.Copies, DeadLettered: s.DeadLettered,
			DeadLetterReason: s.DeadLetterReason, DeadLetterDescription: s.DeadLetterDescription,
			Inactive: s.Inactive, Reason: s.Reason, Rules: []dryRunRule{}}
		for _, r := range s.Rules {
			sets := make(map[string]any, len(r.Sets))
			for k, v := range r.Sets {
				sets[k] = jsonValue(v)
			}
			js.Rules = append(js.Rules, dryRunRule{Name: r.Name, Filter: r.Filter, Action: r.Action, Matched: r.Matched,
				Why: r.Why, Error: r.Error, Sets: sets, Removes: r.Removes})
		}
		if s.Accepted {
			out.Accepted = append(out.Accepted, s.Name)
		}
		if s.DeadLettered {
			out.DeadLettered = append(out.DeadLettered, s.Name)
		}
		out.Subscriptions = append(out.Subscriptions, js)
	}
	return out
}

// jsonValue is v as JSON can carry it: durations and times as text,
// other non-JSON types by their text form.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int64, int32, int, float64, float32, uint64, uint32:
		return x
	case time.Duration:
		return x.String()
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case interface{ String() string }:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return json.RawMessage(b)
}
