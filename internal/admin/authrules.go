package admin

import (
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// Entity-level shared access rules (§1.9): stored with the entity and
// echoed. They are the entity's own policies; namespace-level policies
// (package auth) are what requests are authenticated with.
//
//	<AuthorizationRules>
//	  <AuthorizationRule i:type="SharedAccessAuthorizationRule">
//	    <ClaimType>SharedAccessKey</ClaimType> <ClaimValue>None</ClaimValue>
//	    <Rights><AccessRights>Listen</AccessRights>…</Rights>
//	    <CreatedTime/> <ModifiedTime/> <KeyName/> <PrimaryKey/> <SecondaryKey/>
//	  </AuthorizationRule>
//	</AuthorizationRules>

// The access rights an AuthorizationRule may list.
var accessRights = []string{"Manage", "Send", "Listen"}

func authorizationRulesField[P any](get func(*P) *[]broker.AuthorizationRule) field[P] {
	return func(p *P, e *element) error {
		var rules []broker.AuthorizationRule
		for _, c := range e.children {
			if !c.is(nsServiceBus, "AuthorizationRule") {
				continue
			}
			r, err := parseAuthorizationRule(c)
			if err != nil {
				return err
			}
			rules = append(rules, r)
		}
		*get(p) = rules
		return nil
	}
}

func parseAuthorizationRule(e *element) (broker.AuthorizationRule, error) {
	var r broker.AuthorizationRule
	for _, c := range e.children {
		if c.name.Space != nsServiceBus && c.name.Space != "" {
			continue
		}
		var err error
		switch c.name.Local {
		case "KeyName":
			r.KeyName = c.value()
		case "PrimaryKey":
			r.PrimaryKey = c.value()
		case "SecondaryKey":
			r.SecondaryKey = c.value()
		case "CreatedTime":
			r.CreatedTime, err = parseRuleTime("CreatedTime", c.value())
		case "ModifiedTime":
			r.ModifiedTime, err = parseRuleTime("ModifiedTime", c.value())
		case "Rights":
			r.Rights, err = parseRights(c)
		}
		if err != nil {
			return broker.AuthorizationRule{}, err
		}
	}
	if r.KeyName == "" {
		return broker.AuthorizationRule{}, invalidProperty("AuthorizationRules", "every AuthorizationRule needs a KeyName")
	}
	if len(r.Rights) == 0 {
		return broker.AuthorizationRule{}, invalidProperty("AuthorizationRules", "the rule %q grants no rights; list at least one of Manage, Send, Listen", r.KeyName)
	}
	return r, nil
}

// parseRights reads <Rights><AccessRights>…</AccessRights>…</Rights> into
// canonically spelled, distinct rights.
func parseRights(e *element) ([]string, error) {
	var rights []string
	for _, c := range e.children {
		if !c.is(nsServiceBus, "AccessRights") {
			continue
		}
		i := slices.IndexFunc(accessRights, func(r string) bool { return strings.EqualFold(r, c.value()) })
		if i < 0 {
			return nil, invalidProperty("AuthorizationRules", "%q is not an access right (Manage, Send or Listen)", c.value())
		}
		if !slices.Contains(rights, accessRights[i]) {
			rights = append(rights, accessRights[i])
		}
	}
	return rights, nil
}

// parseRuleTime reads a timestamp; empty is the zero time. .NET writes
// up to 7 fractional digits, and "0001-01-01T00:00:00" without a zone.
func parseRuleTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02T15:04:05.9999999", v); err == nil {
		return t, nil
	}
	return time.Time{}, invalidProperty("AuthorizationRules", "the %s %q is not an RFC 3339 timestamp", name, v)
}

// completeAuthorizationRules does what the service does for rules sent
// without keys: it generates 256-bit ones. Times are kept as sent: a rule
// sent without CreatedTime and ModifiedTime comes back without them, as
// from Service Bus (the Go SDK's live tests compare rules exactly).
func completeAuthorizationRules(rules []broker.AuthorizationRule, _ time.Time) error {
	for i := range rules {
		r := &rules[i]
		for _, k := range []*string{&r.PrimaryKey, &r.SecondaryKey} {
			if *k != "" {
				continue
			}
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			*k = base64.StdEncoding.EncodeToString(b)
		}
	}
	return nil
}

// writeAuthorizationRules writes <AuthorizationRules>, empty when there
// are none (the service always writes the element).
func writeAuthorizationRules(w *xmlWriter, rules []broker.AuthorizationRule) {
	if len(rules) == 0 {
		w.empty("AuthorizationRules")
		return
	}
	w.open("AuthorizationRules")
	for _, r := range rules {
		w.open("AuthorizationRule", "i:type", "SharedAccessAuthorizationRule")
		w.text("ClaimType", "SharedAccessKey")
		w.text("ClaimValue", "None")
		w.open("Rights")
		for _, right := range r.Rights {
			w.text("AccessRights", right)
		}
		w.close("Rights")
		if !r.CreatedTime.IsZero() {
			w.time("CreatedTime", r.CreatedTime)
		}
		if !r.ModifiedTime.IsZero() {
			w.time("ModifiedTime", r.ModifiedTime)
		}
		w.text("KeyName", r.KeyName)
		w.optText("PrimaryKey", r.PrimaryKey)
		w.optText("SecondaryKey", r.SecondaryKey)
		w.close("AuthorizationRule")
	}
	w.close("AuthorizationRules")
}
