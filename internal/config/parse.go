package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Keys of each object of the schema, spelled as the schema spells them.
var (
	rootKeys       = []string{"UserConfig"}
	userConfigKeys = []string{"Namespaces", "Logging"}
	loggingKeys    = []string{"Type"}
	namespaceKeys  = []string{"Name", "Queues", "Topics", "Hosts", "Policies"}
	queueKeys      = []string{"Name", "Properties"}
	topicKeys      = []string{"Name", "Properties", "Subscriptions"}
	subKeys        = []string{"Name", "Properties", "Rules"}
	ruleKeys       = []string{"Name", "Properties"}
	rulePropKeys   = []string{"FilterType", "CorrelationFilter", "SqlFilter", "Action"}
	sqlKeys        = []string{"SqlExpression"}
	corrKeys       = []string{"ContentType", "CorrelationId", "Label", "MessageId", "ReplyTo",
		"ReplyToSessionId", "SessionId", "To", "Properties", "Subject"}

	queuePropKeys = []string{
		"DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive",
		"DuplicateDetectionHistoryTimeWindow", "ForwardDeadLetteredMessagesTo", "ForwardTo",
		"LockDuration", "MaxDeliveryCount", "RequiresDuplicateDetection", "RequiresSession",
		"MaxSizeInMegabytes", "EnableBatchedOperations", "AutoDeleteOnIdle", "Status",
		"UserMetadata", "EnablePartitioning", "SupportOrdering", "MaxMessageSizeInKilobytes",
	}
	topicPropKeys = []string{
		"DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow",
		"RequiresDuplicateDetection", "MaxSizeInMegabytes", "AutoDeleteOnIdle", "Status",
		"UserMetadata", "EnableBatchedOperations", "EnablePartitioning", "SupportOrdering",
		"MaxMessageSizeInKilobytes",
	}
	subPropKeys = []string{
		"DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive", "LockDuration",
		"MaxDeliveryCount", "ForwardDeadLetteredMessagesTo", "ForwardTo", "RequiresSession",
		"DeadLetteringOnFilterEvaluationExceptions", "EnableBatchedOperations",
		"AutoDeleteOnIdle", "Status", "UserMetadata",
	}
)

// parser turns a JSON tree into an EmulatorConfig, recording type errors and
// unknown keys. Range and cross-reference checks are the validator's.
type parser struct {
	strict   bool
	errs     ErrorList
	warnings []FieldError
	raw      map[string]string // path → duration text as written, for messages

	errPaths, errAncestors map[string]bool // built by covers
}

// fields is an object's known keys, by their schema spelling.
type fields map[string]*node

func (p *parser) errorf(path, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// covers reports whether a validation problem at path is redundant with a
// problem the parser already reported: at the same path, inside it, or
// around it. Call it only once parsing is over.
func (p *parser) covers(path string) bool {
	if p.errPaths == nil {
		p.errPaths, p.errAncestors = map[string]bool{}, map[string]bool{}
		for _, e := range p.errs {
			p.errPaths[e.Path] = true
			forAncestors(e.Path, func(a string) { p.errAncestors[a] = true })
		}
	}
	if p.errPaths[""] || p.errPaths[path] || p.errAncestors[path] { // "": the whole document
		return true
	}
	found := false
	forAncestors(path, func(a string) { found = found || p.errPaths[a] })
	return found
}

// forAncestors calls f with each proper, non-empty prefix of path that ends
// before a '.' or '['.
func forAncestors(path string, f func(string)) {
	for i := 1; i < len(path); i++ {
		if path[i] == '.' || path[i] == '[' {
			f(path[:i])
		}
	}
}

// join appends a key to a path, bracketing and quoting keys that are not
// plain identifiers.
func join(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// object reads an object whose keys must be among known. inner, when set,
// are keys that belong one level down, in "Properties"; finding one here
// makes a more helpful warning.
func (p *parser) object(n *node, path string, known, inner []string) fields {
	if n.kind != kObject {
		p.errorf(path, "must be an object, not %s", n.kind)
		return nil
	}
	m := fields{}
	for i, k := range n.keys {
		canon := lookupKey(k, known)
		if canon == "" {
			p.unknownKey(join(path, k), k, known, inner)
			continue
		}
		if _, dup := m[canon]; dup {
			p.errorf(join(path, canon), "duplicate key %q", k)
			continue
		}
		m[canon] = n.elems[i]
	}
	return m
}

// lookupKey returns the known key k names: exactly, else ignoring case.
func lookupKey(k string, known []string) string {
	for _, c := range known {
		if c == k {
			return c
		}
	}
	for _, c := range known {
		if strings.EqualFold(c, k) {
			return c
		}
	}
	return ""
}

func (p *parser) unknownKey(path, key string, known, inner []string) {
	msg := "unknown key"
	if c := lookupKey(key, inner); c != "" {
		msg += fmt.Sprintf("; %s belongs inside \"Properties\"", c)
	} else if c := closest(key, known); c != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	p.warn(path, msg)
}

// warn records a problem that is a warning, or an error in strict mode.
func (p *parser) warn(path, msg string) {
	if p.strict {
		p.errs = append(p.errs, &FieldError{Path: path, Msg: msg})
		return
	}
	p.warnings = append(p.warnings, FieldError{Path: path, Msg: msg})
}

// closest returns the known key nearest to k when it is a likely typo.
func closest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// get returns the value of key, or nil when it is absent or null.
func (f fields) get(key string) *node {
	n := f[key]
	if n == nil || n.kind == kNull {
		return nil
	}
	return n
}

func (p *parser) array(f fields, path, key string) []*node {
	n := f.get(key)
	if n == nil {
		return nil
	}
	if n.kind != kArray {
		p.errorf(join(path, key), "must be an array, not %s", n.kind)
		return nil
	}
	return n.elems
}

func (p *parser) str(f fields, path, key string) *string {
	n := f.get(key)
	if n == nil {
		return nil
	}
	if n.kind != kString {
		p.errorf(join(path, key), "must be a string, not %s", n.kind)
		return nil
	}
	s := n.str
	return &s
}

// name reads a required name; "" when absent (the validator reports it).
func (p *parser) name(f fields, path string) string {
	if s := p.str(f, path, "Name"); s != nil {
		return *s
	}
	return ""
}

// forward reads ForwardTo or ForwardDeadLetteredMessagesTo: "" is unset.
func (p *parser) forward(f fields, path, key string) *string {
	s := p.str(f, path, key)
	if s == nil || *s == "" {
		return nil
	}
	return s
}

func (p *parser) bool(f fields, path, key string) *bool {
	n := f.get(key)
	if n == nil {
		return nil
	}
	if n.kind != kBool {
		p.errorf(join(path, key), "must be true or false, not %s", n.kind)
		return nil
	}
	b := n.b
	return &b
}

// integer reads an integral number within [lo, hi].
func (p *parser) integer(f fields, path, key string, lo, hi int64) (int64, bool) {
	n := f.get(key)
	if n == nil {
		return 0, false
	}
	path = join(path, key)
	if n.kind != kNumber {
		p.errorf(path, "must be an integer, not %s", n.kind)
		return 0, false
	}
	v, err := strconv.ParseInt(string(n.num), 10, 64)
	if err != nil {
		// 3.0 and 3e2 are integers too.
		fv, ferr := strconv.ParseFloat(string(n.num), 64)
		switch {
		case isRangeErr(err) || isRangeErr(ferr) || fv < -(1<<63) || fv >= 1<<63:
			p.errorf(path, "%s is out of range", n.num)
			return 0, false
		case ferr != nil || fv != math.Trunc(fv):
			p.errorf(path, "must be an integer, not %s", n.num)
			return 0, false
		}
		v = int64(fv)
	}
	if v < lo || v > hi {
		p.errorf(path, "%s is out of range", n.num)
		return 0, false
	}
	return v, true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func (p *parser) int32(f fields, path, key string) *int32 {
	v, ok := p.integer(f, path, key, math.MinInt32, math.MaxInt32)
	if !ok {
		return nil
	}
	i := int32(v)
	return &i
}

func (p *parser) int64(f fields, path, key string) *int64 {
	v, ok := p.integer(f, path, key, math.MinInt64, math.MaxInt64)
	if !ok {
		return nil
	}
	return &v
}

func (p *parser) duration(f fields, path, key string) *time.Duration {
	s := p.str(f, path, key)
	if s == nil {
		return nil
	}
	path = join(path, key)
	d, err := ParseISO8601(*s)
	if err != nil {
		p.errorf(path, "%q is not an ISO 8601 duration (e.g. PT30S, PT5M, P7D)", *s)
		return nil
	}
	p.raw[path] = *s
	return &d
}

func (p *parser) status(f fields, path, key string) *EntityStatus {
	s := p.str(f, path, key)
	if s == nil {
		return nil
	}
	st := EntityStatus(*s)
	for _, c := range statuses {
		if strings.EqualFold(*s, string(c)) {
			st = c
		}
	}
	return &st
}

func (p *parser) config(root *node) *EmulatorConfig {
	cfg := &EmulatorConfig{}
	top := p.object(root, "", rootKeys, nil)
	if top == nil {
		return cfg
	}
	uc := top.get("UserConfig")
	if uc == nil {
		p.errorf("UserConfig", "is required")
		return cfg
	}
	const path = "UserConfig"
	f := p.object(uc, path, userConfigKeys, nil)
	if f == nil {
		return cfg
	}
	if f.get("Namespaces") == nil {
		p.errorf(join(path, "Namespaces"), "is required")
	}
	for i, n := range p.array(f, path, "Namespaces") {
		cfg.Namespaces = append(cfg.Namespaces, p.namespace(n, index(join(path, "Namespaces"), i)))
	}
	if n := f.get("Logging"); n != nil {
		lpath := join(path, "Logging")
		if lf := p.object(n, lpath, loggingKeys, nil); lf != nil {
			cfg.Logging = &Logging{}
			if t := p.str(lf, lpath, "Type"); t != nil {
				cfg.Logging.Type = *t
			}
		}
	}
	return cfg
}

func (p *parser) namespace(n *node, path string) (ns Namespace) {
	f := p.object(n, path, namespaceKeys, nil)
	if f == nil {
		return ns
	}
	ns.Name = p.name(f, path)
	for i, q := range p.array(f, path, "Queues") {
		ns.Queues = append(ns.Queues, p.queue(q, index(join(path, "Queues"), i)))
	}
	for i, t := range p.array(f, path, "Topics") {
		ns.Topics = append(ns.Topics, p.topic(t, index(join(path, "Topics"), i)))
	}
	for i, h := range p.array(f, path, "Hosts") {
		if h.kind != kString {
			p.errorf(index(join(path, "Hosts"), i), "must be a string, not %s", h.kind)
			ns.Hosts = append(ns.Hosts, "") // keeps the indexes of the paths
			continue
		}
		ns.Hosts = append(ns.Hosts, h.str)
	}
	ns.Policies = p.str(f, path, "Policies")
	return ns
}

// properties returns the Properties object of an entity, or nil.
func (p *parser) properties(f fields, path string, known []string) (fields, string) {
	path = join(path, "Properties")
	n := f.get("Properties")
	if n == nil {
		return fields{}, path
	}
	pf := p.object(n, path, known, nil)
	if pf == nil {
		pf = fields{}
	}
	return pf, path
}

func (p *parser) queue(n *node, path string) (q Queue) {
	f := p.object(n, path, queueKeys, queuePropKeys)
	if f == nil {
		return q
	}
	q.Name = p.name(f, path)
	pf, pp := p.properties(f, path, queuePropKeys)
	q.Props = QueueProps{
		LockDuration:                        p.duration(pf, pp, "LockDuration"),
		MaxSizeInMegabytes:                  p.int64(pf, pp, "MaxSizeInMegabytes"),
		RequiresDuplicateDetection:          p.bool(pf, pp, "RequiresDuplicateDetection"),
		DuplicateDetectionHistoryTimeWindow: p.duration(pf, pp, "DuplicateDetectionHistoryTimeWindow"),
		RequiresSession:                     p.bool(pf, pp, "RequiresSession"),
		DefaultMessageTimeToLive:            p.duration(pf, pp, "DefaultMessageTimeToLive"),
		DeadLetteringOnMessageExpiration:    p.bool(pf, pp, "DeadLetteringOnMessageExpiration"),
		MaxDeliveryCount:                    p.int32(pf, pp, "MaxDeliveryCount"),
		EnableBatchedOperations:             p.bool(pf, pp, "EnableBatchedOperations"),
		AutoDeleteOnIdle:                    p.duration(pf, pp, "AutoDeleteOnIdle"),
		Status:                              p.status(pf, pp, "Status"),
		ForwardTo:                           p.forward(pf, pp, "ForwardTo"),
		ForwardDeadLetteredMessagesTo:       p.forward(pf, pp, "ForwardDeadLetteredMessagesTo"),
		UserMetadata:                        p.str(pf, pp, "UserMetadata"),
		EnablePartitioning:                  p.bool(pf, pp, "EnablePartitioning"),
		SupportOrdering:                     p.bool(pf, pp, "SupportOrdering"),
		MaxMessageSizeInKilobytes:           p.int64(pf, pp, "MaxMessageSizeInKilobytes"),
	}
	return q
}

func (p *parser) topic(n *node, path string) (t Topic) {
	f := p.object(n, path, topicKeys, topicPropKeys)
	if f == nil {
		return t
	}
	t.Name = p.name(f, path)
	pf, pp := p.properties(f, path, topicPropKeys)
	t.Props = TopicProps{
		DefaultMessageTimeToLive:            p.duration(pf, pp, "DefaultMessageTimeToLive"),
		DuplicateDetectionHistoryTimeWindow: p.duration(pf, pp, "DuplicateDetectionHistoryTimeWindow"),
		RequiresDuplicateDetection:          p.bool(pf, pp, "RequiresDuplicateDetection"),
		MaxSizeInMegabytes:                  p.int64(pf, pp, "MaxSizeInMegabytes"),
		AutoDeleteOnIdle:                    p.duration(pf, pp, "AutoDeleteOnIdle"),
		Status:                              p.status(pf, pp, "Status"),
		UserMetadata:                        p.str(pf, pp, "UserMetadata"),
		EnableBatchedOperations:             p.bool(pf, pp, "EnableBatchedOperations"),
		EnablePartitioning:                  p.bool(pf, pp, "EnablePartitioning"),
		SupportOrdering:                     p.bool(pf, pp, "SupportOrdering"),
		MaxMessageSizeInKilobytes:           p.int64(pf, pp, "MaxMessageSizeInKilobytes"),
	}
	for i, s := range p.array(f, path, "Subscriptions") {
		t.Subscriptions = append(t.Subscriptions, p.subscription(s, index(join(path, "Subscriptions"), i)))
	}
	return t
}

func (p *parser) subscription(n *node, path string) (s Subscription) {
	f := p.object(n, path, subKeys, subPropKeys)
	if f == nil {
		return s
	}
	s.Name = p.name(f, path)
	pf, pp := p.properties(f, path, subPropKeys)
	s.Props = SubscriptionProps{
		LockDuration:                              p.duration(pf, pp, "LockDuration"),
		RequiresSession:                           p.bool(pf, pp, "RequiresSession"),
		DefaultMessageTimeToLive:                  p.duration(pf, pp, "DefaultMessageTimeToLive"),
		DeadLetteringOnMessageExpiration:          p.bool(pf, pp, "DeadLetteringOnMessageExpiration"),
		DeadLetteringOnFilterEvaluationExceptions: p.bool(pf, pp, "DeadLetteringOnFilterEvaluationExceptions"),
		MaxDeliveryCount:                          p.int32(pf, pp, "MaxDeliveryCount"),
		EnableBatchedOperations:                   p.bool(pf, pp, "EnableBatchedOperations"),
		AutoDeleteOnIdle:                          p.duration(pf, pp, "AutoDeleteOnIdle"),
		Status:                                    p.status(pf, pp, "Status"),
		ForwardTo:                                 p.forward(pf, pp, "ForwardTo"),
		ForwardDeadLetteredMessagesTo:             p.forward(pf, pp, "ForwardDeadLetteredMessagesTo"),
		UserMetadata:                              p.str(pf, pp, "UserMetadata"),
	}
	for i, r := range p.array(f, path, "Rules") {
		s.Rules = append(s.Rules, p.rule(r, index(join(path, "Rules"), i)))
	}
	return s
}

func (p *parser) rule(n *node, path string) (r Rule) {
	f := p.object(n, path, ruleKeys, rulePropKeys)
	if f == nil {
		return r
	}
	r.Name = p.name(f, path)
	pn := f.get("Properties")
	pp := join(path, "Properties")
	if pn == nil {
		p.errorf(pp, "is required")
		return r
	}
	pf := p.object(pn, pp, rulePropKeys, nil)
	if pf == nil {
		return r
	}
	if t := p.str(pf, pp, "FilterType"); t != nil {
		r.Filter.Type = FilterType(*t)
		for _, c := range []FilterType{FilterCorrelation, FilterSQL} {
			if strings.EqualFold(*t, string(c)) {
				r.Filter.Type = c
			}
		}
	}
	if n := pf.get("SqlFilter"); n != nil {
		r.Filter.SQL = p.sqlExpression(n, join(pp, "SqlFilter"))
	}
	if n := pf.get("CorrelationFilter"); n != nil {
		r.Filter.Correlation = p.correlation(n, join(pp, "CorrelationFilter"))
	}
	if n := pf.get("Action"); n != nil {
		r.Action = p.sqlExpression(n, join(pp, "Action"))
	}
	return r
}

// sqlExpression reads {"SqlExpression": "..."}, which must be non-empty.
func (p *parser) sqlExpression(n *node, path string) string {
	f := p.object(n, path, sqlKeys, nil)
	if f == nil {
		return ""
	}
	s := p.str(f, path, "SqlExpression")
	if s == nil {
		if f["SqlExpression"] == nil || f["SqlExpression"].kind == kNull {
			p.errorf(join(path, "SqlExpression"), "is required")
		}
		return ""
	}
	if strings.TrimSpace(*s) == "" {
		p.errorf(join(path, "SqlExpression"), "must not be empty")
		return ""
	}
	return *s
}

func (p *parser) correlation(n *node, path string) *CorrelationFilter {
	f := p.object(n, path, corrKeys, nil)
	if f == nil {
		return nil
	}
	c := &CorrelationFilter{
		ContentType:      p.str(f, path, "ContentType"),
		CorrelationID:    p.str(f, path, "CorrelationId"),
		Label:            p.str(f, path, "Label"),
		MessageID:        p.str(f, path, "MessageId"),
		ReplyTo:          p.str(f, path, "ReplyTo"),
		ReplyToSessionID: p.str(f, path, "ReplyToSessionId"),
		SessionID:        p.str(f, path, "SessionId"),
		To:               p.str(f, path, "To"),
	}
	if subj := p.str(f, path, "Subject"); subj != nil {
		if c.Label != nil {
			p.errorf(join(path, "Subject"), "Subject and Label are the same field; give one")
		} else {
			c.Label = subj
		}
	}
	if pn := f.get("Properties"); pn != nil {
		c.Properties = p.appProperties(pn, join(path, "Properties"))
	}
	return c
}

// appProperties reads a correlation filter's application properties. Their
// names are data: matched exactly, never case-folded.
func (p *parser) appProperties(n *node, path string) map[string]any {
	if n.kind != kObject {
		p.errorf(path, "must be an object, not %s", n.kind)
		return nil
	}
	if len(n.keys) == 0 {
		return nil
	}
	m := make(map[string]any, len(n.keys))
	for i, k := range n.keys {
		kp := join(path, k)
		if _, dup := m[k]; dup {
			p.errorf(kp, "duplicate key %q", k)
			continue
		}
		v := n.elems[i]
		switch v.kind {
		case kString:
			m[k] = v.str
		case kBool:
			m[k] = v.b
		case kNumber:
			if x, ok := numberValue(v.num); ok {
				m[k] = x
			} else {
				p.errorf(kp, "%s is out of range", v.num)
			}
		default:
			p.errorf(kp, "must be a string, number or boolean, not %s", v.kind)
		}
	}
	return m
}

// numberValue maps a JSON number to int64 when written as an integer that
// fits, else to float64; false when it is beyond float64's range.
func numberValue(num json.Number) (any, bool) {
	s := string(num)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
