package console

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// exportNamespace is the namespace name written to Config.json, the
// emulator's sample name.
const exportNamespace = "sbemulatorns"

// export serves today's topology as an emulator Config.json (what
// `busbar serve --config` loads): every queue and topic with all its
// properties, every subscription with its rules. What the file cannot
// hold (rule parameters, entity authorization rules) stops it with the
// list of what is in the way, as a partial file would load into
// something different.
func (c *Console) export(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.grant.Resource != "" {
		return &userError{status: http.StatusForbidden, msg: "Exporting needs a key for the whole namespace."}
	}
	cfg, problems := c.exportConfig()
	if len(problems) > 0 {
		return badInput("Config.json cannot hold all of today's topology: %s.", strings.Join(problems, "; "))
	}
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="Config.json"`)
	_, _ = w.Write(data)
	return nil
}

func ptr[T any](v T) *T { return &v }

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (c *Console) exportConfig() (*config.EmulatorConfig, []string) {
	ns := config.Namespace{Name: exportNamespace, Queues: []config.Queue{}, Topics: []config.Topic{}}
	var problems []string
	for _, q := range c.b.ListQueues() {
		p := q.Properties
		if len(p.AuthorizationRules) > 0 {
			problems = append(problems, fmt.Sprintf("queue '%s' has authorization rules", q.Name))
		}
		ns.Queues = append(ns.Queues, config.Queue{Name: q.Name, Props: config.QueueProps{
			LockDuration: ptr(p.LockDuration), MaxSizeInMegabytes: ptr(p.MaxSizeInMegabytes),
			RequiresDuplicateDetection: ptr(p.RequiresDuplicateDetection), DuplicateDetectionHistoryTimeWindow: ptr(p.DuplicateDetectionHistoryTimeWindow),
			RequiresSession: ptr(p.RequiresSession), DefaultMessageTimeToLive: ptr(p.DefaultMessageTimeToLive),
			DeadLetteringOnMessageExpiration: ptr(p.DeadLetteringOnMessageExpiration), MaxDeliveryCount: ptr(p.MaxDeliveryCount),
			EnableBatchedOperations: ptr(p.EnableBatchedOperations), AutoDeleteOnIdle: ptr(p.AutoDeleteOnIdle),
			Status: ptr(config.EntityStatus(p.Status)), ForwardTo: optString(p.ForwardTo),
			ForwardDeadLetteredMessagesTo: optString(p.ForwardDeadLetteredMessagesTo), UserMetadata: optString(p.UserMetadata),
			EnablePartitioning: ptr(p.EnablePartitioning), SupportOrdering: ptr(p.SupportOrdering),
			MaxMessageSizeInKilobytes: ptr(p.MaxMessageSizeInKilobytes),
		}})
	}
	for _, t := range c.b.ListTopics() {
		p := t.Properties
		if len(p.AuthorizationRules) > 0 {
			problems = append(problems, fmt.Sprintf("topic '%s' has authorization rules", t.Name))
		}
		ct := config.Topic{Name: t.Name, Subscriptions: []config.Subscription{}, Props: config.TopicProps{
			DefaultMessageTimeToLive: ptr(p.DefaultMessageTimeToLive), DuplicateDetectionHistoryTimeWindow: ptr(p.DuplicateDetectionHistoryTimeWindow),
			RequiresDuplicateDetection: ptr(p.RequiresDuplicateDetection), MaxSizeInMegabytes: ptr(p.MaxSizeInMegabytes),
			AutoDeleteOnIdle: ptr(p.AutoDeleteOnIdle), Status: ptr(config.EntityStatus(p.Status)), UserMetadata: optString(p.UserMetadata),
			EnableBatchedOperations: ptr(p.EnableBatchedOperations), EnablePartitioning: ptr(p.EnablePartitioning),
			SupportOrdering: ptr(p.SupportOrdering), MaxMessageSizeInKilobytes: ptr(p.MaxMessageSizeInKilobytes),
		}}
		subs, err := c.b.ListSubscriptions(t.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, sb := range subs {
			sp := sb.Properties
			cs := config.Subscription{Name: sb.Name, Rules: []config.Rule{}, Props: config.SubscriptionProps{
				LockDuration: ptr(sp.LockDuration), RequiresSession: ptr(sp.RequiresSession),
				DefaultMessageTimeToLive: ptr(sp.DefaultMessageTimeToLive), DeadLetteringOnMessageExpiration: ptr(sp.DeadLetteringOnMessageExpiration),
				DeadLetteringOnFilterEvaluationExceptions: ptr(sp.DeadLetteringOnFilterEvaluationExceptions), MaxDeliveryCount: ptr(sp.MaxDeliveryCount),
				EnableBatchedOperations: ptr(sp.EnableBatchedOperations), AutoDeleteOnIdle: ptr(sp.AutoDeleteOnIdle),
				Status: ptr(config.EntityStatus(sp.Status)), ForwardTo: optString(sp.ForwardTo),
				ForwardDeadLetteredMessagesTo: optString(sp.ForwardDeadLetteredMessagesTo), UserMetadata: optString(sp.UserMetadata),
			}}
			rules, err := c.b.ListRules(t.Name, sb.Name, 0, 0)
			if err != nil {
				continue
			}
			if len(rules) == 0 {
				problems = append(problems, fmt.Sprintf("subscription '%s' has no rules (Config.json would give it $Default)", broker.SubscriptionPath(t.Name, sb.Name)))
			}
			if len(rules) == 1 && rules[0].Name == "$Default" && rules[0].Filter.Kind == broker.FilterTrue && rules[0].Action == nil {
				rules = nil // what a subscription without rules gets
			}
			for _, rd := range rules {
				where := fmt.Sprintf("rule '%s' of '%s'", rd.Name, broker.SubscriptionPath(t.Name, sb.Name))
				if len(rd.Filter.Parameters) > 0 || (rd.Action != nil && len(rd.Action.Parameters) > 0) {
					problems = append(problems, where+" has @parameters")
				}
				cr := config.Rule{Name: rd.Name}
				if rd.Action != nil {
					cr.Action = rd.Action.Expression
				}
				if cf := rd.Filter.Correlation; rd.Filter.Kind == broker.FilterCorrelation && cf != nil {
					cr.Filter = config.Filter{Type: config.FilterCorrelation, Correlation: &config.CorrelationFilter{
						ContentType: optString(cf.ContentType), CorrelationID: optString(cf.CorrelationID), Label: optString(cf.Label),
						MessageID: optString(cf.MessageID), ReplyTo: optString(cf.ReplyTo), ReplyToSessionID: optString(cf.ReplyToSessionID),
						SessionID: optString(cf.SessionID), To: optString(cf.To), Properties: cf.Properties}}
				} else {
					cr.Filter = config.Filter{Type: config.FilterSQL, SQL: rd.Filter.Expression}
				}
				cs.Rules = append(cs.Rules, cr)
			}
			ct.Subscriptions = append(ct.Subscriptions, cs)
		}
		ns.Topics = append(ns.Topics, ct)
	}
	return &config.EmulatorConfig{Namespaces: []config.Namespace{ns}, Logging: &config.Logging{Type: "Console"}}, problems
}
