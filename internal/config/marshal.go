package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// The marshal* types give Config.json's key order (the emulator sample's)
// and leave unset properties out.
type (
	marshalRoot struct {
		UserConfig marshalUserConfig `json:"UserConfig"`
	}
	marshalUserConfig struct {
		Namespaces []marshalNamespace `json:"Namespaces"`
		Logging    *marshalLogging    `json:"Logging,omitempty"`
	}
	marshalLogging struct {
		Type string `json:"Type,omitempty"`
	}
	marshalNamespace struct {
		Name     string         `json:"Name"`
		Hosts    []string       `json:"Hosts,omitempty"`
		Policies *string        `json:"Policies,omitempty"`
		Queues   []marshalQueue `json:"Queues"`
		Topics   []marshalTopic `json:"Topics"`
	}
	marshalQueue struct {
		Name       string            `json:"Name"`
		Properties marshalQueueProps `json:"Properties"`
	}
	marshalQueueProps struct {
		DeadLetteringOnMessageExpiration    *bool   `json:",omitempty"`
		DefaultMessageTimeToLive            *string `json:",omitempty"`
		DuplicateDetectionHistoryTimeWindow *string `json:",omitempty"`
		ForwardDeadLetteredMessagesTo       *string `json:",omitempty"`
		ForwardTo                           *string `json:",omitempty"`
		LockDuration                        *string `json:",omitempty"`
		MaxDeliveryCount                    *int32  `json:",omitempty"`
		RequiresDuplicateDetection          *bool   `json:",omitempty"`
		RequiresSession                     *bool   `json:",omitempty"`
		MaxSizeInMegabytes                  *int64  `json:",omitempty"`
		EnableBatchedOperations             *bool   `json:",omitempty"`
		AutoDeleteOnIdle                    *string `json:",omitempty"`
		Status                              *string `json:",omitempty"`
		UserMetadata                        *string `json:",omitempty"`
		EnablePartitioning                  *bool   `json:",omitempty"`
		SupportOrdering                     *bool   `json:",omitempty"`
		MaxMessageSizeInKilobytes           *int64  `json:",omitempty"`
	}
	marshalTopic struct {
		Name          string                `json:"Name"`
		Properties    marshalTopicProps     `json:"Properties"`
		Subscriptions []marshalSubscription `json:"Subscriptions"`
	}
	marshalTopicProps struct {
		DefaultMessageTimeToLive            *string `json:",omitempty"`
		DuplicateDetectionHistoryTimeWindow *string `json:",omitempty"`
		RequiresDuplicateDetection          *bool   `json:",omitempty"`
		MaxSizeInMegabytes                  *int64  `json:",omitempty"`
		AutoDeleteOnIdle                    *string `json:",omitempty"`
		Status                              *string `json:",omitempty"`
		UserMetadata                        *string `json:",omitempty"`
		EnableBatchedOperations             *bool   `json:",omitempty"`
		EnablePartitioning                  *bool   `json:",omitempty"`
		SupportOrdering                     *bool   `json:",omitempty"`
		MaxMessageSizeInKilobytes           *int64  `json:",omitempty"`
	}
	marshalSubscription struct {
		Name       string          `json:"Name"`
		Properties marshalSubProps `json:"Properties"`
		Rules      []marshalRule   `json:"Rules,omitempty"`
	}
	marshalSubProps struct {
		DeadLetteringOnMessageExpiration          *bool   `json:",omitempty"`
		DefaultMessageTimeToLive                  *string `json:",omitempty"`
		LockDuration                              *string `json:",omitempty"`
		MaxDeliveryCount                          *int32  `json:",omitempty"`
		ForwardDeadLetteredMessagesTo             *string `json:",omitempty"`
		ForwardTo                                 *string `json:",omitempty"`
		RequiresSession                           *bool   `json:",omitempty"`
		DeadLetteringOnFilterEvaluationExceptions *bool   `json:",omitempty"`
		EnableBatchedOperations                   *bool   `json:",omitempty"`
		AutoDeleteOnIdle                          *string `json:",omitempty"`
		Status                                    *string `json:",omitempty"`
		UserMetadata                              *string `json:",omitempty"`
	}
	marshalRule struct {
		Name       string           `json:"Name"`
		Properties marshalRuleProps `json:"Properties"`
	}
	marshalRuleProps struct {
		FilterType        string             `json:"FilterType,omitempty"`
		CorrelationFilter *marshalCorrFilter `json:"CorrelationFilter,omitempty"`
		SqlFilter         *marshalSQL        `json:"SqlFilter,omitempty"`
		Action            *marshalSQL        `json:"Action,omitempty"`
	}
	marshalSQL struct {
		SqlExpression string `json:"SqlExpression"`
	}
	marshalCorrFilter struct {
		ContentType      *string   `json:",omitempty"`
		CorrelationId    *string   `json:",omitempty"`
		Label            *string   `json:",omitempty"`
		MessageId        *string   `json:",omitempty"`
		ReplyTo          *string   `json:",omitempty"`
		ReplyToSessionId *string   `json:",omitempty"`
		SessionId        *string   `json:",omitempty"`
		To               *string   `json:",omitempty"`
		Properties       jsonProps `json:",omitempty"`
	}
)

// jsonProps writes correlation filter properties so that they load back
// with the same Go types: float64 values always carry a '.' or an exponent.
type jsonProps map[string]any

func (m jsonProps) MarshalJSON() ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k) // a string always marshals
		b.Write(kb)
		b.WriteByte(':')
		var vb []byte
		var err error
		switch x := m[k].(type) {
		case float64:
			vb, err = floatJSON(x)
		case float32:
			vb, err = floatJSON(float64(x))
		case string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			vb, err = json.Marshal(x)
		default:
			err = fmt.Errorf("property %q: %T is not a string, number or boolean", k, x)
		}
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func floatJSON(f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v cannot be written in JSON", f)
	}
	b := strconv.AppendFloat(nil, f, 'g', -1, 64)
	if !bytes.ContainsAny(b, ".e") {
		b = append(b, ".0"...)
	}
	return b, nil
}

// Marshal writes c as an indented Config.json (plain JSON, no comments) that
// LoadEmulatorConfig reads back to an equal EmulatorConfig. Durations are
// written as FormatISO8601 does; unset properties are left out; Queues,
// Topics and Subscriptions are always written, as the emulator's schema
// requires them. Logging is written only when set: for a file the emulator
// itself accepts, set it (e.g. &Logging{Type: "File"}). Marshal does not
// validate; it fails only on values JSON cannot hold.
func (c *EmulatorConfig) Marshal() ([]byte, error) {
	root := marshalRoot{UserConfig: marshalUserConfig{Namespaces: []marshalNamespace{}}}
	if c.Logging != nil {
		root.UserConfig.Logging = &marshalLogging{Type: c.Logging.Type}
	}
	for _, ns := range c.Namespaces {
		mns := marshalNamespace{Name: ns.Name, Hosts: ns.Hosts, Policies: ns.Policies, Queues: []marshalQueue{}, Topics: []marshalTopic{}}
		for _, q := range ns.Queues {
			p := q.Props
			mns.Queues = append(mns.Queues, marshalQueue{Name: q.Name, Properties: marshalQueueProps{
				DeadLetteringOnMessageExpiration:    p.DeadLetteringOnMessageExpiration,
				DefaultMessageTimeToLive:            iso(p.DefaultMessageTimeToLive),
				DuplicateDetectionHistoryTimeWindow: iso(p.DuplicateDetectionHistoryTimeWindow),
				ForwardDeadLetteredMessagesTo:       p.ForwardDeadLetteredMessagesTo,
				ForwardTo:                           p.ForwardTo,
				LockDuration:                        iso(p.LockDuration),
				MaxDeliveryCount:                    p.MaxDeliveryCount,
				RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
				RequiresSession:                     p.RequiresSession,
				MaxSizeInMegabytes:                  p.MaxSizeInMegabytes,
				EnableBatchedOperations:             p.EnableBatchedOperations,
				AutoDeleteOnIdle:                    iso(p.AutoDeleteOnIdle),
				Status:                              (*string)(p.Status),
				UserMetadata:                        p.UserMetadata,
				EnablePartitioning:                  p.EnablePartitioning,
				SupportOrdering:                     p.SupportOrdering,
				MaxMessageSizeInKilobytes:           p.MaxMessageSizeInKilobytes,
			}})
		}
		for _, t := range ns.Topics {
			p := t.Props
			mt := marshalTopic{Name: t.Name, Subscriptions: []marshalSubscription{}, Properties: marshalTopicProps{
				DefaultMessageTimeToLive:            iso(p.DefaultMessageTimeToLive),
				DuplicateDetectionHistoryTimeWindow: iso(p.DuplicateDetectionHistoryTimeWindow),
				RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
				MaxSizeInMegabytes:                  p.MaxSizeInMegabytes,
				AutoDeleteOnIdle:                    iso(p.AutoDeleteOnIdle),
				Status:                              (*string)(p.Status),
				UserMetadata:                        p.UserMetadata,
				EnableBatchedOperations:             p.EnableBatchedOperations,
				EnablePartitioning:                  p.EnablePartitioning,
				SupportOrdering:                     p.SupportOrdering,
				MaxMessageSizeInKilobytes:           p.MaxMessageSizeInKilobytes,
			}}
			for _, s := range t.Subscriptions {
				mt.Subscriptions = append(mt.Subscriptions, marshalSub(s))
			}
			mns.Topics = append(mns.Topics, mt)
		}
		root.UserConfig.Namespaces = append(root.UserConfig.Namespaces, mns)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return b.Bytes(), nil
}

func marshalSub(s Subscription) marshalSubscription {
	p := s.Props
	ms := marshalSubscription{Name: s.Name, Properties: marshalSubProps{
		DeadLetteringOnMessageExpiration:          p.DeadLetteringOnMessageExpiration,
		DefaultMessageTimeToLive:                  iso(p.DefaultMessageTimeToLive),
		LockDuration:                              iso(p.LockDuration),
		MaxDeliveryCount:                          p.MaxDeliveryCount,
		ForwardDeadLetteredMessagesTo:             p.ForwardDeadLetteredMessagesTo,
		ForwardTo:                                 p.ForwardTo,
		RequiresSession:                           p.RequiresSession,
		DeadLetteringOnFilterEvaluationExceptions: p.DeadLetteringOnFilterEvaluationExceptions,
		EnableBatchedOperations:                   p.EnableBatchedOperations,
		AutoDeleteOnIdle:                          iso(p.AutoDeleteOnIdle),
		Status:                                    (*string)(p.Status),
		UserMetadata:                              p.UserMetadata,
	}}
	for _, r := range s.Rules {
		mr := marshalRule{Name: r.Name, Properties: marshalRuleProps{FilterType: string(r.Filter.Type)}}
		if r.Filter.SQL != "" {
			mr.Properties.SqlFilter = &marshalSQL{SqlExpression: r.Filter.SQL}
		}
		if c := r.Filter.Correlation; c != nil {
			mr.Properties.CorrelationFilter = &marshalCorrFilter{
				ContentType:      c.ContentType,
				CorrelationId:    c.CorrelationID,
				Label:            c.Label,
				MessageId:        c.MessageID,
				ReplyTo:          c.ReplyTo,
				ReplyToSessionId: c.ReplyToSessionID,
				SessionId:        c.SessionID,
				To:               c.To,
				Properties:       jsonProps(c.Properties),
			}
		}
		if r.Action != "" {
			mr.Properties.Action = &marshalSQL{SqlExpression: r.Action}
		}
		ms.Rules = append(ms.Rules, mr)
	}
	return ms
}

func iso(d *time.Duration) *string {
	if d == nil {
		return nil
	}
	s := FormatISO8601(*d)
	return &s
}
