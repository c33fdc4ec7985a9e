package config

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/names"
)

// Service Bus limits checked by the validator (docs/wire/management-plane.md
// §1.9 and §4). These are the service's, not the emulator's quotas.
const (
	MinLockDuration        = 5 * time.Second
	MaxLockDuration        = 5 * time.Minute
	MinMessageTimeToLive   = time.Second
	MinDuplicateDetection  = 20 * time.Second
	MaxDuplicateDetection  = 7 * 24 * time.Hour
	MinAutoDeleteOnIdle    = 5 * time.Minute
	MaxEntityNameLength    = names.MaxEntityLength       // queue and topic paths
	MaxChildNameLength     = names.MaxSubscriptionLength // subscription, rule and namespace names
	MaxSQLExpressionLength = 1024
	MaxUserMetadataLength  = 1024
	MaxMessageSizeKB       = 102400
)

// DefaultRuleName is the name of the rule Service Bus gives a subscription
// created without one. It is accepted as a rule name although the emulator's
// name pattern does not allow '$'.
const DefaultRuleName = names.DefaultRule

type validator struct {
	opts     Options
	raw      map[string]string // duration text as written, by path
	errs     ErrorList
	warnings []FieldError
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) warn(path, msg string) {
	if v.opts.Strict {
		v.errs = append(v.errs, &FieldError{Path: path, Msg: msg})
		return
	}
	v.warnings = append(v.warnings, FieldError{Path: path, Msg: msg})
}

func (v *validator) config(c *EmulatorConfig) {
	if len(c.Namespaces) == 0 {
		v.errorf("UserConfig.Namespaces", "at least one namespace is required")
	}
	seen, hosts := map[string]string{}, map[string]string{}
	for i := range c.Namespaces {
		path := index("UserConfig.Namespaces", i)
		ns := &c.Namespaces[i]
		if v.name(join(path, "Name"), ns.Name, nameNamespace) {
			v.unique(seen, join(path, "Name"), ns.Name)
		}
		v.namespace(ns, path)
		v.access(ns, path, hosts)
	}
	if c.Logging != nil {
		t := strings.ReplaceAll(c.Logging.Type, " ", "")
		ok := false
		for _, want := range []string{"File", "Console", "File,Console", "Console,File"} {
			ok = ok || strings.EqualFold(t, want)
		}
		switch {
		case c.Logging.Type == "":
			v.warn("UserConfig.Logging.Type", "is missing (File, Console, File,Console); Busbar ignores it")
		case !ok:
			v.warn("UserConfig.Logging.Type", fmt.Sprintf(
				"%q is not a logging type the emulator knows (File, Console, File,Console); Busbar ignores it", c.Logging.Type))
		}
	}
}

// unique records name at path in seen (keyed case-insensitively) and
// reports an earlier holder.
func (v *validator) unique(seen map[string]string, path, name string) {
	key := strings.ToLower(name)
	if prev, dup := seen[key]; dup {
		v.errorf(path, "%q is already used by %s (names are case-insensitive)", name, prev)
		return
	}
	seen[key] = path
}

// access checks a namespace's Hosts (host names, each selecting one
// namespace only) and Policies (the --policies form, at least one).
func (v *validator) access(ns *Namespace, path string, hosts map[string]string) {
	for i, h := range ns.Hosts {
		hp := index(join(path, "Hosts"), i)
		if err := checkHostName(h); err != nil {
			v.errorf(hp, "%s", err)
			continue
		}
		v.unique(hosts, hp, h)
	}
	if ns.Policies != nil {
		pols, err := Server{Policies: *ns.Policies}.PolicyList()
		switch {
		case err != nil:
			v.errorf(join(path, "Policies"), "%s", err)
		case len(pols) == 0:
			v.errorf(join(path, "Policies"), "names no policy (want NAME=KEY[:RIGHTS];…)")
		}
	}
}

// checkHostName checks a host name without a port: letters, digits, '-'
// and '.', at most 253 characters.
func checkHostName(h string) error {
	ok := h != "" && len(h) <= 253 && h[0] != '.' && h[len(h)-1] != '.'
	for i := 0; ok && i < len(h); i++ {
		ok = alnum(h[i]) || h[i] == '-' || h[i] == '.'
	}
	if !ok {
		return fmt.Errorf("%q is not a host name (letters, digits, '-' and '.', no port)", h)
	}
	return nil
}

func (v *validator) namespace(ns *Namespace, path string) {
	// declared holds the declared queues and topics, lower-cased, for the
	// uniqueness and forward checks.
	declared := map[string]string{}
	for i := range ns.Queues {
		q := &ns.Queues[i]
		qp := index(join(path, "Queues"), i)
		if v.name(join(qp, "Name"), q.Name, nameEntity) {
			v.unique(declared, join(qp, "Name"), q.Name)
		}
	}
	for i := range ns.Topics {
		t := &ns.Topics[i]
		tp := index(join(path, "Topics"), i)
		if v.name(join(tp, "Name"), t.Name, nameEntity) {
			v.unique(declared, join(tp, "Name"), t.Name)
		}
	}
	for i := range ns.Queues {
		q := &ns.Queues[i]
		pp := join(index(join(path, "Queues"), i), "Properties")
		v.queueProps(&q.Props, pp)
		v.forward(ns.Name, declared, q.Name, join(pp, "ForwardTo"), q.Props.ForwardTo)
		v.forward(ns.Name, declared, q.Name, join(pp, "ForwardDeadLetteredMessagesTo"), q.Props.ForwardDeadLetteredMessagesTo)
	}
	for i := range ns.Topics {
		t := &ns.Topics[i]
		tp := index(join(path, "Topics"), i)
		v.topicProps(&t.Props, join(tp, "Properties"))
		subs := map[string]string{}
		for j := range t.Subscriptions {
			s := &t.Subscriptions[j]
			sp := index(join(tp, "Subscriptions"), j)
			if v.name(join(sp, "Name"), s.Name, nameChild) {
				v.unique(subs, join(sp, "Name"), s.Name)
			}
			pp := join(sp, "Properties")
			v.subProps(&s.Props, pp)
			// A subscription is not a forward target, so it cannot name
			// itself; "" never matches an entity.
			v.forward(ns.Name, declared, "", join(pp, "ForwardTo"), s.Props.ForwardTo)
			v.forward(ns.Name, declared, "", join(pp, "ForwardDeadLetteredMessagesTo"), s.Props.ForwardDeadLetteredMessagesTo)
			rules := map[string]string{}
			for k := range s.Rules {
				r := &s.Rules[k]
				rp := index(join(sp, "Rules"), k)
				if v.name(join(rp, "Name"), r.Name, nameRule) {
					v.unique(rules, join(rp, "Name"), r.Name)
				}
				v.rule(r, join(rp, "Properties"))
			}
		}
	}
}

// forward checks a ForwardTo or ForwardDeadLetteredMessagesTo of the entity
// self (a queue name, or "" for a subscription).
func (v *validator) forward(ns string, declared map[string]string, self, path string, target *string) {
	if target == nil || *target == "" {
		return
	}
	name := ForwardEntityName(*target)
	if name != *target && name == "" {
		v.errorf(path, "%q names no entity", *target)
		return
	}
	// The target may be an entity that exists already under a name from
	// before the names rule.
	if err := names.CheckExisting(names.Entity, name); err != nil {
		v.errorf(path, "%s", err)
		return
	}
	if self != "" && strings.EqualFold(name, self) {
		v.errorf(path, "%q is the entity itself; an entity cannot forward to itself", *target)
		return
	}
	if _, ok := declared[strings.ToLower(name)]; ok {
		return
	}
	if v.opts.EntityExists != nil && v.opts.EntityExists(ns, name) {
		return
	}
	v.errorf(path, "%q is not a queue or topic of namespace %q", *target, ns)
}

// ForwardEntityName returns the entity a ForwardTo or
// ForwardDeadLetteredMessagesTo value names. The emulator writes bare names
// ("orders"); Service Bus stores absolute URIs ("sb://ns.example/orders"),
// so for a value with a scheme and a host the URI's path, without its
// slashes at either end, is the name. Any other value is returned as is.
func ForwardEntityName(target string) string {
	if !strings.Contains(target, "://") {
		return target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return target
	}
	return strings.Trim(u.Path, "/")
}

type nameKind int

const (
	nameEntity    nameKind = iota // queue or topic
	nameChild                     // subscription
	nameRule                      // rule
	nameNamespace                 // namespace: as a subscription
)

// name checks a name: a namespace's against the emulator's pattern
// ^[A-Za-z0-9]$|^[A-Za-z0-9][\w-.]*[A-Za-z0-9]$ (\w being ASCII here) and
// at most 50 characters, the others against Busbar's one naming rule
// (package names), or with Options.ExistingNames the rule for names of
// entities that may exist already. It reports false after an error.
func (v *validator) name(path, name string, kind nameKind) bool {
	var k names.Kind
	switch kind {
	case nameEntity:
		k = names.Entity
	case nameChild:
		k = names.Subscription
	case nameRule:
		k = names.Rule
	default:
		return v.namespaceName(path, name)
	}
	if name == "" {
		v.errorf(path, "is required")
		return false
	}
	check := names.Check
	if v.opts.ExistingNames {
		check = names.CheckExisting
	}
	if err := check(k, name); err != nil {
		v.errorf(path, "%s", err)
		return false
	}
	return true
}

func (v *validator) namespaceName(path, name string) bool {
	if name == "" {
		v.errorf(path, "is required")
		return false
	}
	if err := CheckNamespaceName(name); err != nil {
		v.errorf(path, "%s", err)
		return false
	}
	return true
}

// CheckNamespaceName checks a namespace name against the emulator's
// pattern (letters, digits, '.', '-' and '_', starting and ending with a
// letter or digit) and MaxChildNameLength.
func CheckNamespaceName(name string) error {
	ok := name != "" && alnum(name[0]) && alnum(name[len(name)-1])
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = alnum(c) || c == '_' || c == '-' || c == '.'
	}
	if !ok {
		return fmt.Errorf("%q is not a valid name: use only letters, digits, '.', '-' and '_', and start and end with a letter or digit", name)
	}
	if len(name) > MaxChildNameLength {
		return fmt.Errorf("%q is too long (%d characters, at most %d)", name, len(name), MaxChildNameLength)
	}
	return nil
}

func alnum(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// show returns a duration as the file wrote it, or in ISO 8601.
func (v *validator) show(path string, d time.Duration) string {
	if s, ok := v.raw[path]; ok {
		return s
	}
	return FormatISO8601(d)
}

// durationRange checks lo ≤ *d ≤ hi (hi 0: no upper bound).
func (v *validator) durationRange(path string, d *time.Duration, lo, hi time.Duration, text string) {
	if d != nil && (*d < lo || hi > 0 && *d > hi) {
		v.errorf(path, "%q is out of range (%s)", v.show(path, *d), text)
	}
}

func (v *validator) intRange(path string, n *int64, lo, hi int64, text string) {
	if n != nil && (*n < lo || *n > hi) {
		v.errorf(path, "%d is out of range (%s)", *n, text)
	}
}

func i64(p *int32) *int64 {
	if p == nil {
		return nil
	}
	n := int64(*p)
	return &n
}

// common checks the properties queues, topics and subscriptions share.
type commonProps struct {
	lock, ttl, dupWindow, autoDelete *time.Duration
	maxDelivery, maxSize, maxMsgSize *int64
	status                           *EntityStatus
	userMetadata                     *string
}

func (v *validator) common(c commonProps, path string) {
	v.durationRange(join(path, "LockDuration"), c.lock, MinLockDuration, MaxLockDuration, "5 s … 5 min")
	v.durationRange(join(path, "DefaultMessageTimeToLive"), c.ttl, MinMessageTimeToLive, 0, "≥ 1 s")
	v.durationRange(join(path, "DuplicateDetectionHistoryTimeWindow"), c.dupWindow,
		MinDuplicateDetection, MaxDuplicateDetection, "20 s … 7 days")
	v.durationRange(join(path, "AutoDeleteOnIdle"), c.autoDelete, MinAutoDeleteOnIdle, 0, "≥ 5 min")
	v.intRange(join(path, "MaxDeliveryCount"), c.maxDelivery, 1, math.MaxInt32, "≥ 1")
	v.intRange(join(path, "MaxSizeInMegabytes"), c.maxSize, 1, math.MaxInt64, "≥ 1")
	v.intRange(join(path, "MaxMessageSizeInKilobytes"), c.maxMsgSize, 1, MaxMessageSizeKB, "1 … 102400")
	if c.status != nil && !slices.Contains(statuses, *c.status) {
		v.errorf(join(path, "Status"), "%q is not a status (Active, Disabled, SendDisabled, ReceiveDisabled)", *c.status)
	}
	if c.userMetadata != nil {
		if n := utf8.RuneCountInString(*c.userMetadata); n > MaxUserMetadataLength {
			v.errorf(join(path, "UserMetadata"), "is too long (%d characters, at most %d)", n, MaxUserMetadataLength)
		}
	}
}

func (v *validator) queueProps(p *QueueProps, path string) {
	v.common(commonProps{
		lock: p.LockDuration, ttl: p.DefaultMessageTimeToLive,
		dupWindow: p.DuplicateDetectionHistoryTimeWindow, autoDelete: p.AutoDeleteOnIdle,
		maxDelivery: i64(p.MaxDeliveryCount), maxSize: p.MaxSizeInMegabytes,
		maxMsgSize: p.MaxMessageSizeInKilobytes, status: p.Status, userMetadata: p.UserMetadata,
	}, path)
}

func (v *validator) topicProps(p *TopicProps, path string) {
	v.common(commonProps{
		ttl: p.DefaultMessageTimeToLive, dupWindow: p.DuplicateDetectionHistoryTimeWindow,
		autoDelete: p.AutoDeleteOnIdle, maxSize: p.MaxSizeInMegabytes,
		maxMsgSize: p.MaxMessageSizeInKilobytes, status: p.Status, userMetadata: p.UserMetadata,
	}, path)
}

func (v *validator) subProps(p *SubscriptionProps, path string) {
	v.common(commonProps{
		lock: p.LockDuration, ttl: p.DefaultMessageTimeToLive, autoDelete: p.AutoDeleteOnIdle,
		maxDelivery: i64(p.MaxDeliveryCount), status: p.Status, userMetadata: p.UserMetadata,
	}, path)
}

func (v *validator) rule(r *Rule, path string) {
	f := &r.Filter
	corr, sql := join(path, "CorrelationFilter"), join(path, "SqlFilter")
	switch f.Type {
	case "":
		v.errorf(join(path, "FilterType"), "is required (\"Correlation\" or \"Sql\")")
	case FilterCorrelation:
		if f.Correlation == nil {
			v.errorf(corr, "is required when FilterType is \"Correlation\"")
		}
		if f.SQL != "" {
			v.errorf(sql, "is not allowed when FilterType is \"Correlation\"")
		}
	case FilterSQL:
		if f.SQL == "" {
			v.errorf(sql, "is required when FilterType is \"Sql\"")
		}
		if f.Correlation != nil {
			v.errorf(corr, "is not allowed when FilterType is \"Sql\"")
		}
	default:
		v.errorf(join(path, "FilterType"), "%q is not a filter type (want \"Correlation\" or \"Sql\")", f.Type)
	}
	v.sqlText(join(sql, "SqlExpression"), f.SQL)
	v.sqlText(join(join(path, "Action"), "SqlExpression"), r.Action)
	if c := f.Correlation; c != nil {
		set := len(c.Properties) > 0
		for _, s := range []*string{c.ContentType, c.CorrelationID, c.Label, c.MessageID, c.ReplyTo,
			c.ReplyToSessionID, c.SessionID, c.To} {
			set = set || s != nil
		}
		if !set {
			v.errorf(corr, "needs at least one of ContentType, CorrelationId, Label, MessageId, "+
				"ReplyTo, ReplyToSessionId, SessionId, To or Properties")
		}
		keys := make([]string, 0, len(c.Properties))
		for k := range c.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pp := join(corr, "Properties")
		for _, k := range keys {
			if k == "" {
				v.errorf(join(pp, k), "a property name must not be empty")
			}
			if !propertyValue(c.Properties[k]) {
				v.errorf(join(pp, k), "%v (%T) is not a string, number or boolean", c.Properties[k], c.Properties[k])
			}
		}
	}
}

func (v *validator) sqlText(path, s string) {
	if n := utf8.RuneCountInString(s); n > MaxSQLExpressionLength {
		v.errorf(path, "is too long (%d characters, at most %d)", n, MaxSQLExpressionLength)
	}
}

// propertyValue reports whether x can be a correlation filter property
// value in a Config.json.
func propertyValue(x any) bool {
	switch x := x.(type) {
	case string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	case float64:
		return !math.IsNaN(x) && !math.IsInf(x, 0)
	case float32:
		return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
	}
	return false
}

// ForwardRef is a ForwardTo or ForwardDeadLetteredMessagesTo reference.
type ForwardRef struct {
	Namespace  string
	Path       string // JSON path of the property
	Source     string // "queue", or "topic/Subscriptions/subscription"
	Target     string // the value as written
	Entity     string // the entity it names: ForwardEntityName(Target)
	DeadLetter bool   // ForwardDeadLetteredMessagesTo
}

// ForwardTargets lists every forward reference of c, in file order, for a
// caller that resolves targets itself.
func (c *EmulatorConfig) ForwardTargets() []ForwardRef {
	var refs []ForwardRef
	add := func(ns, path, source string, to, dlq *string) {
		if to != nil && *to != "" {
			refs = append(refs, ForwardRef{ns, join(path, "ForwardTo"), source, *to, ForwardEntityName(*to), false})
		}
		if dlq != nil && *dlq != "" {
			refs = append(refs, ForwardRef{ns, join(path, "ForwardDeadLetteredMessagesTo"), source, *dlq, ForwardEntityName(*dlq), true})
		}
	}
	for i, ns := range c.Namespaces {
		path := index("UserConfig.Namespaces", i)
		for j, q := range ns.Queues {
			add(ns.Name, join(index(join(path, "Queues"), j), "Properties"), q.Name,
				q.Props.ForwardTo, q.Props.ForwardDeadLetteredMessagesTo)
		}
		for j, t := range ns.Topics {
			tp := index(join(path, "Topics"), j)
			for k, s := range t.Subscriptions {
				add(ns.Name, join(index(join(tp, "Subscriptions"), k), "Properties"),
					t.Name+"/Subscriptions/"+s.Name, s.Props.ForwardTo, s.Props.ForwardDeadLetteredMessagesTo)
			}
		}
	}
	return refs
}
