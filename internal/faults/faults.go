// Package faults is Busbar's fault injector: rules, added at run time
// through the admin API, that make the broker fail on purpose for the
// next N matching operations, so that client code can test the retry and
// recovery paths it has for the failures of the real service.
//
// A Rule names a kind of fault, the entity it applies to (a queue, a
// topic, a subscription path, or "*" for all) and optionally the
// operation, the link name, an application property the message must
// carry (name=value) and how many matching operations to let pass first
// (Skip). It then fires on the next Count matching operations and is
// removed, or expires at its TTL, whichever comes first; expiry reads the
// injected clock.
//
//	kind              operations (default first)        effect
//	lock-lost         settle, management                disposition rejected with com.microsoft:message-lock-lost,
//	                                                    renew-lock / update-disposition answered 410
//	server-busy       send, settle, attach, management  rejected / refused / 503 with com.microsoft:server-busy
//	detach            send, receive, settle, attach     the link is detached (or refused) with Condition
//	close-connection  send, receive, settle, attach,    the connection is closed with Condition
//	                  management
//	delay             settle, management                the answer waits Delay first
//	drop-frame        receive, management               the delivery or the answer is not sent
//	store-error       store                             the store write fails (a store error, 503-class)
//
// The package holds the rules and decides; the AMQP layer (package
// servicebus) and the store wrapper (Store) apply what Take returns. Every
// fault that fires is counted in its rule, reported to the Observer
// (metrics) and logged.
package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault.
const (
	LockLost        Kind = "lock-lost"
	ServerBusy      Kind = "server-busy"
	Detach          Kind = "detach"
	CloseConnection Kind = "close-connection"
	Delay           Kind = "delay"
	DropFrame       Kind = "drop-frame"
	StoreError      Kind = "store-error"
)

// Op is an operation a fault can be injected into.
type Op string

// The operations.
const (
	OpSend       Op = "send"       // a transfer from a client's sender link
	OpReceive    Op = "receive"    // a message delivered to a client's receiver link
	OpSettle     Op = "settle"     // a client's disposition on a receiver link
	OpAttach     Op = "attach"     // a client attaching a link to an entity
	OpManagement Op = "management" // a request to an entity's $management node
	OpStore      Op = "store"      // a store commit writing an entity's messages
)

// kinds lists, per kind, the operations it applies to; the first is the
// default.
var kinds = map[Kind][]Op{
	LockLost:        {OpSettle, OpManagement},
	ServerBusy:      {OpSend, OpSettle, OpAttach, OpManagement},
	Detach:          {OpSend, OpReceive, OpSettle, OpAttach},
	CloseConnection: {OpSend, OpReceive, OpSettle, OpAttach, OpManagement},
	Delay:           {OpSettle, OpManagement},
	DropFrame:       {OpReceive, OpManagement},
	StoreError:      {OpStore},
}

// Bounds on what a client can make the injector hold.
const (
	MaxRules       = 256
	MaxCount       = 1_000_000
	MaxTTL         = 24 * time.Hour
	DefaultTTL     = 10 * time.Minute
	MaxDelay       = 5 * time.Minute
	MaxRetryAfter  = 5 * time.Minute
	maxText        = 1024
	maxEntity      = 260 + len("/Subscriptions/") + 50
	DefaultRetryAf = 2 * time.Second
)

// Duration is a time.Duration written in JSON as Go's text form ("1.5s").
type Duration time.Duration

// MarshalJSON writes "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads "1.5s" (or a number of milliseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ms float64
		if err2 := json.Unmarshal(b, &ms); err2 != nil {
			return fmt.Errorf("a duration is a string such as \"1.5s\" or a number of milliseconds")
		}
		*d = Duration(ms * float64(time.Millisecond))
		return nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not a duration (such as 500ms, 2s or 10m)", s)
	}
	*d = Duration(v)
	return nil
}

// Spec is a rule as a client asks for it.
type Spec struct {
	Kind     Kind   `json:"kind"`
	Entity   string `json:"entity"` // queue, topic, "topic/Subscriptions/sub", or "*"
	Op       Op     `json:"op,omitempty"`
	Link     string `json:"link,omitempty"`     // link name to match; "" any
	Property string `json:"property,omitempty"` // "name=value" an application property must match (send, receive)
	Count    int    `json:"count,omitempty"`    // operations to fail; default 1
	Skip     int    `json:"skip,omitempty"`     // matching operations to let pass first
	// Condition is the AMQP condition of a detach or close-connection
	// (default amqp:link:detach-forced, amqp:connection:forced).
	Condition   string   `json:"condition,omitempty"`
	Description string   `json:"description,omitempty"`
	Delay       Duration `json:"delay,omitempty"`      // delay: how long
	RetryAfter  Duration `json:"retryAfter,omitempty"` // server-busy: the wait the client is told
	TTL         Duration `json:"ttl,omitempty"`        // default 10m, at most 24h
}

// Rule is an active rule: its spec, completed with defaults, and its
// state.
type Rule struct {
	ID string `json:"id"`
	Spec
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	Remaining int       `json:"remaining"` // faults still to inject
	Skipping  int       `json:"skipping"`  // matching operations still to let pass
	Injected  int       `json:"injected"`  // faults injected so far

	propName, propValue string
}

// Fault is one fault to inject, as Take returns it.
type Fault struct {
	Rule        string
	Kind        Kind
	Op          Op
	Condition   string
	Description string
	Delay       time.Duration
	RetryAfter  time.Duration
}

// Error is an injected failure, for the layer that maps errors to what a
// client sees (servicebus's classify). Condition is set for detach and
// close-connection.
type Error struct {
	Kind      Kind
	Condition string
	Msg       string
}

func (e *Error) Error() string { return e.Msg }

// Err is the fault as an error for the client.
func (f *Fault) Err() *Error {
	msg := f.Description
	switch f.Kind {
	case ServerBusy:
		if msg == "" {
			msg = "The request was terminated because the entity is being throttled."
		}
		secs := int((f.RetryAfter + time.Second - 1) / time.Second)
		msg = fmt.Sprintf("%s Please wait %d seconds and try again.", strings.TrimSuffix(msg, "."), secs)
	case LockLost:
		if msg == "" {
			msg = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."
		}
	default:
		if msg == "" {
			msg = fmt.Sprintf("A %s fault was injected", f.Kind)
		}
	}
	return &Error{Kind: f.Kind, Condition: f.Condition, Msg: fmt.Sprintf("%s (injected fault %s).", strings.TrimSuffix(msg, "."), f.Rule)}
}

// Point is an operation offered to Take.
type Point struct {
	Op     Op
	Entity string
	Link   string
	// Props are the application properties of the message(s) involved
	// (send, receive); a rule with a property matches if any does.
	Props []map[string]any
	// StoreIDs are the store entity ids a commit writes (OpStore).
	StoreIDs []uint64
	// Kinds, when set, are the only kinds that apply here (a management
	// request without lock tokens cannot lose a lock).
	Kinds []Kind
}

// Observer is told of every injected fault (metrics).
type Observer interface {
	FaultInjected(kind string)
}

// Set is the rules of one broker. The zero value is not usable; call New.
// A nil *Set injects nothing. Safe for concurrent use.
type Set struct {
	clock clock.Clock
	log   *slog.Logger
	obs   Observer

	mu       sync.Mutex
	rules    []*Rule
	next     int
	resolve  func(entity string) (uint64, bool)
	armed    map[Op]int // live rules per operation, to keep Take cheap
	injected map[Kind]int
}

// New returns an empty Set. clk tells expiry; log and obs may be nil.
func New(clk clock.Clock, log *slog.Logger, obs Observer) *Set {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{clock: clk, log: log, obs: obs, armed: map[Op]int{}, injected: map[Kind]int{}}
}

// SetResolver sets how store-error rules find their entity's store id
// (broker.EntityStoreID).
func (s *Set) SetResolver(f func(entity string) (uint64, bool)) {
	s.mu.Lock()
	s.resolve = f
	s.mu.Unlock()
}

// Kinds lists the kinds of fault.
func Kinds() []Kind {
	return []Kind{LockLost, ServerBusy, Detach, CloseConnection, Delay, DropFrame, StoreError}
}

// Ops lists the operations k applies to, the default first.
func Ops(k Kind) []Op { return slices.Clone(kinds[k]) }

// Add validates sp, completes it with defaults and adds it. Its errors
// are *ValidationError.
func (s *Set) Add(sp Spec) (Rule, error) {
	r := &Rule{Spec: sp}
	if err := r.complete(); err != nil {
		return Rule{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now().UTC()
	s.expireLocked(now)
	if len(s.rules) >= MaxRules {
		return Rule{}, invalid("there are already %d fault rules, the most the broker holds; clear some first", MaxRules)
	}
	s.next++
	r.ID = "f" + strconv.Itoa(s.next)
	r.Created = now
	r.Expires = now.Add(time.Duration(r.TTL))
	s.rules = append(s.rules, r)
	s.armed[r.Op]++
	s.log.Warn("fault rule added", "id", r.ID, "kind", r.Kind, "entity", r.Entity, "op", r.Op, "count", r.Count, "expires", r.Expires)
	return *r, nil
}

// ValidationError is a rule the injector refuses.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// IsValidation reports whether err is a refused rule.
func IsValidation(err error) bool {
	var ve *ValidationError
	return errors.As(err, &ve)
}

// complete checks r and fills in its defaults, step by step: what it
// targets, how often it fires, its timings, and its AMQP condition.
func (r *Rule) complete() error {
	ops, ok := kinds[r.Kind]
	if !ok {
		names := make([]string, 0, len(kinds))
		for _, k := range Kinds() {
			names = append(names, string(k))
		}
		return invalid("unknown fault kind %q: use one of %s", r.Kind, strings.Join(names, ", "))
	}
	if err := r.completeTarget(ops); err != nil {
		return err
	}
	if err := r.completeCount(); err != nil {
		return err
	}
	if err := r.completeTimings(); err != nil {
		return err
	}
	if err := r.completeCondition(); err != nil {
		return err
	}
	r.Remaining, r.Skipping = r.Count, r.Skip
	return nil
}

// completeTarget checks what r applies to: entity, operation (one of ops,
// the first by default), property condition and link name.
func (r *Rule) completeTarget(ops []Op) error {
	r.Entity = strings.Trim(strings.TrimSpace(r.Entity), "/")
	switch {
	case r.Entity == "":
		return invalid("a fault rule needs an entity: a queue, a topic, a subscription path (topic/Subscriptions/name) or * for all")
	case len(r.Entity) > maxEntity:
		return invalid("the entity is %d characters, longer than any entity path (%d)", len(r.Entity), maxEntity)
	case len(r.Link) > maxText, len(r.Property) > maxText, len(r.Condition) > maxText, len(r.Description) > maxText:
		return invalid("link, property, condition and description are at most %d characters", maxText)
	}
	if r.Op == "" {
		r.Op = ops[0]
	}
	if !slices.Contains(ops, r.Op) {
		return invalid("a %s fault applies to %s, not to %q", r.Kind, joinOps(ops), r.Op)
	}
	if r.Property != "" {
		name, value, ok := strings.Cut(r.Property, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return invalid("property %q is not name=value", r.Property)
		}
		if r.Op != OpSend && r.Op != OpReceive {
			return invalid("a property condition needs a message: it applies to send and receive, not %s", r.Op)
		}
		r.propName, r.propValue = strings.TrimSpace(name), value
	}
	if r.Link != "" && (r.Op == OpStore || r.Op == OpManagement) {
		return invalid("a link name applies to send, receive, settle and attach, not %s", r.Op)
	}
	return nil
}

// completeCount checks how often r fires: count (1 by default) and skip.
func (r *Rule) completeCount() error {
	switch {
	case r.Count == 0:
		r.Count = 1
	case r.Count < 0 || r.Count > MaxCount:
		return invalid("count must be from 1 to %d", MaxCount)
	}
	if r.Skip < 0 || r.Skip > MaxCount {
		return invalid("skip must be from 0 to %d", MaxCount)
	}
	return nil
}

// completeTimings checks r's ttl, delay and retryAfter, each bounded and
// the last two only for the kind that takes them.
func (r *Rule) completeTimings() error {
	switch {
	case r.TTL == 0:
		r.TTL = Duration(DefaultTTL)
	case r.TTL < 0 || time.Duration(r.TTL) > MaxTTL:
		return invalid("ttl must be positive and at most %s", MaxTTL)
	}
	if r.Delay < 0 || time.Duration(r.Delay) > MaxDelay {
		return invalid("delay must be from 0 to %s", MaxDelay)
	}
	if r.Kind == Delay && r.Delay == 0 {
		return invalid("a delay fault needs a delay (such as 5s)")
	}
	if r.Kind != Delay && r.Delay != 0 {
		return invalid("only a delay fault takes a delay")
	}
	if r.RetryAfter < 0 || time.Duration(r.RetryAfter) > MaxRetryAfter {
		return invalid("retryAfter must be from 0 to %s", MaxRetryAfter)
	}
	if r.Kind == ServerBusy && r.RetryAfter == 0 {
		r.RetryAfter = Duration(DefaultRetryAf)
	}
	if r.Kind != ServerBusy && r.RetryAfter != 0 {
		return invalid("only a server-busy fault takes retryAfter")
	}
	return nil
}

// completeCondition checks r's AMQP error condition, defaulted for the
// kinds that take one.
func (r *Rule) completeCondition() error {
	switch r.Kind {
	case Detach:
		if r.Condition == "" {
			r.Condition = "amqp:link:detach-forced"
		}
	case CloseConnection:
		if r.Condition == "" {
			r.Condition = "amqp:connection:forced"
		}
	default:
		if r.Condition != "" {
			return invalid("only detach and close-connection faults take a condition (%s has its own)", r.Kind)
		}
	}
	if r.Condition != "" && (strings.ContainsAny(r.Condition, " \t\r\n") || !strings.Contains(r.Condition, ":")) {
		return invalid("condition %q is not an AMQP condition symbol such as amqp:link:detach-forced", r.Condition)
	}
	return nil
}

func joinOps(ops []Op) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// List returns the live rules, oldest first.
func (s *Set) List() []Rule {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.clock.Now())
	out := make([]Rule, len(s.rules))
	for i, r := range s.rules {
		out[i] = *r
	}
	return out
}

// Injected returns how many faults of each kind were injected so far.
func (s *Set) Injected() map[Kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Kind]int, len(s.injected))
	for k, v := range s.injected {
		out[k] = v
	}
	return out
}

// Clear removes the rule with id, or every rule when id is "". It
// returns how many it removed; an unknown id removes none.
func (s *Set) Clear(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	s.rules = slices.DeleteFunc(s.rules, func(r *Rule) bool {
		if id == "" || strings.EqualFold(r.ID, id) {
			s.armed[r.Op]--
			n++
			return true
		}
		return false
	})
	if n > 0 {
		s.log.Info("fault rules cleared", "id", id, "removed", n)
	}
	return n
}

func (s *Set) expireLocked(now time.Time) {
	s.rules = slices.DeleteFunc(s.rules, func(r *Rule) bool {
		if now.Before(r.Expires) {
			return false
		}
		s.armed[r.Op]--
		s.log.Info("fault rule expired", "id", r.ID, "kind", r.Kind, "injected", r.Injected)
		return true
	})
}

// Take returns the fault to inject into the operation at p, nil for none.
// The first live rule that matches decides: it lets the operation pass
// while it is skipping, else fires, and is removed after its last fault.
func (s *Set) Take(p Point) *Fault {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.armed[p.Op] <= 0 {
		s.mu.Unlock()
		return nil
	}
	now := s.clock.Now()
	s.expireLocked(now)
	var f *Fault
	for i, r := range s.rules {
		if !s.matchLocked(r, p) {
			continue
		}
		if r.Skipping > 0 {
			r.Skipping--
			break
		}
		r.Remaining--
		r.Injected++
		s.injected[r.Kind]++
		f = &Fault{Rule: r.ID, Kind: r.Kind, Op: p.Op, Condition: r.Condition, Description: r.Description,
			Delay: time.Duration(r.Delay), RetryAfter: time.Duration(r.RetryAfter)}
		if r.Remaining <= 0 {
			s.rules = slices.Delete(s.rules, i, i+1)
			s.armed[r.Op]--
		}
		break
	}
	s.mu.Unlock()
	if f != nil {
		s.log.Warn("fault injected", "id", f.Rule, "kind", f.Kind, "op", p.Op, "entity", p.Entity, "link", p.Link)
		if s.obs != nil {
			s.obs.FaultInjected(string(f.Kind))
		}
	}
	return f
}

func (s *Set) matchLocked(r *Rule, p Point) bool {
	if r.Op != p.Op || (p.Kinds != nil && !slices.Contains(p.Kinds, r.Kind)) {
		return false
	}
	if r.Link != "" && r.Link != p.Link {
		return false
	}
	if p.Op == OpStore {
		if r.Entity == "*" {
			return true
		}
		if s.resolve == nil {
			return false
		}
		id, ok := s.resolve(r.Entity)
		return ok && slices.Contains(p.StoreIDs, id)
	}
	if !entityMatches(r.Entity, p.Entity) {
		return false
	}
	if r.propName == "" {
		return true
	}
	for _, props := range p.Props {
		if v, ok := props[r.propName]; ok && fmt.Sprint(v) == r.propValue {
			return true
		}
	}
	return false
}

// entityMatches: "*" matches all; otherwise the path, case-insensitively,
// or one of its sub-queues ("q" matches "q/$DeadLetterQueue").
func entityMatches(rule, path string) bool {
	if rule == "*" {
		return true
	}
	if strings.EqualFold(rule, path) {
		return true
	}
	return len(path) > len(rule)+2 && strings.EqualFold(path[:len(rule)], rule) && path[len(rule)] == '/' && path[len(rule)+1] == '$'
}
