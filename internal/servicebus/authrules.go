package servicebus

import (
	"strings"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// EntityRules returns the lookup auth.Config.EntityRules wants: the shared
// access rules stored with a queue or topic (through the admin API or
// Config.json), as auth policies. Rules without a key or rights are
// skipped. b is read at each call, so rules added, changed or removed at
// run time take effect at once; get returns the broker (nil before it is
// open, which has no rules).
func EntityRules(get func() *broker.Broker) func(entity string) []auth.Policy {
	return EntityRulesOr(get, nil)
}

// EntityRulesOr is EntityRules with the rules of a queue or topic the
// broker does not serve read from remote (on a cluster node: the shared
// catalog, for entities other nodes serve); remote may be nil.
func EntityRulesOr(get func() *broker.Broker, remote func(entity string) []broker.AuthorizationRule) func(entity string) []auth.Policy {
	return func(entity string) []auth.Policy {
		b := get()
		if b == nil {
			return nil
		}
		var rules []broker.AuthorizationRule
		if q, err := b.GetQueue(entity); err == nil {
			rules = q.Properties.AuthorizationRules
		} else if t, err := b.GetTopic(entity); err == nil {
			rules = t.Properties.AuthorizationRules
		} else if remote != nil {
			rules = remote(entity)
		}
		var out []auth.Policy
		for _, r := range rules {
			rights, err := auth.ParseRights(strings.Join(r.Rights, ","))
			if err != nil || r.KeyName == "" || (r.PrimaryKey == "" && r.SecondaryKey == "") {
				continue
			}
			out = append(out, auth.Policy{Name: r.KeyName, PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey, Rights: rights})
		}
		return out
	}
}
