// Package names is Busbar's one rule for the names of queues, topics,
// subscriptions and rules. The admin API, AMQP link addresses, the CLI and
// the Config.json loader all check names here, so a name one of them
// accepts is accepted by all, and every name that can be created can be
// shown, addressed, exported and deleted again.
//
// # The rule
//
// It is Service Bus's, as Azure documents it for each kind of entity (the
// resource naming rules of Microsoft.ServiceBus, the REST API's entity
// pages and the service's own error text, "Entity segments can contain
// only letters, numbers, periods (.), hyphens (-), and underscores (_)"),
// made exact where the documents leave room:
//
//	queue, topic   1–260 characters: ASCII letters, digits, '.', '-', '_', and
//	               '/' between path segments. Starts and ends with a letter or
//	               digit. No empty segment ("a//b"), no segment "." or ".."
//	               ("a/../b" would name another path once any URL or path
//	               library cleaned it), no segment "Subscriptions" (reserved:
//	               "t/Subscriptions/s" is a subscription's path).
//	subscription   1–50 characters: ASCII letters, digits, '.', '-', '_'.
//	               Starts and ends with a letter or digit.
//	rule           as a subscription, and "$Default", the name of the rule
//	               Service Bus gives a subscription created without one.
//
// Names are compared ASCII case-insensitively, as Service Bus does: "Orders"
// and "orders" are one queue, which keeps the case it was created with.
//
// # Names that already exist
//
// Busbar before this rule accepted more: queue and topic names with "." or
// ".." segments or starting or ending with '.', '-' or '_', and
// subscription and rule names of up to 50 arbitrary characters but '/',
// '\', '?', '#', '@', '*' and control characters. Entities with such names
// may be in a data directory. Check applies to names given to new entities;
// CheckExisting is that older, looser rule, applied where an existing
// entity is looked up (show, send, receive, update, delete, export), so
// those entities stay reachable until they are deleted.
package names

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Length limits, in characters (the names the rule accepts are ASCII, so
// bytes too).
const (
	MaxEntityLength       = 260 // queue or topic
	MaxSubscriptionLength = 50
	MaxRuleLength         = 50
)

// DefaultRule is the name of the rule a subscription gets when it is
// created without one.
const DefaultRule = "$Default"

// reservedSegment may not be a segment of a queue or topic name: it makes
// subscription paths ("topic/Subscriptions/sub").
const reservedSegment = "Subscriptions"

// Kind is what a name names.
type Kind uint8

// Kinds of names.
const (
	Entity       Kind = iota + 1 // a queue or a topic: they share one name space
	Subscription                 // a topic's subscription
	Rule                         // a subscription's rule
)

func (k Kind) String() string {
	switch k {
	case Entity:
		return "queue or topic"
	case Subscription:
		return "subscription"
	case Rule:
		return "rule"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Rule states the rule for a kind of name in one sentence, for error
// messages and help texts.
func (k Kind) Rule() string {
	switch k {
	case Entity:
		return "Queue and topic names are 1 to 260 letters, digits, periods (.), hyphens (-) and underscores (_) in segments separated by slashes (/); they start and end with a letter or digit, and no segment is empty, '.', '..' or 'Subscriptions'."
	case Subscription:
		return "Subscription names are 1 to 50 letters, digits, periods (.), hyphens (-) and underscores (_), starting and ending with a letter or digit."
	case Rule:
		return "Rule names are 1 to 50 letters, digits, periods (.), hyphens (-) and underscores (_), starting and ending with a letter or digit, or $Default."
	}
	return ""
}

// Error is a name that breaks the rule.
type Error struct {
	Kind Kind
	// Name is the name as given.
	Name string
	// Problem says what is wrong, as a clause: "it contains ' '".
	Problem string
}

// maxQuoted bounds how much of a name an error message repeats.
const maxQuoted = 300

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("The %s name is empty. %s", e.Kind, e.Kind.Rule())
	}
	name := e.Name
	if len(name) > maxQuoted {
		name = name[:maxQuoted] + "…"
	}
	return fmt.Sprintf("The %s name %q is not valid: %s. %s", e.Kind, name, e.Problem, e.Kind.Rule())
}

func invalid(k Kind, name, format string, args ...any) *Error {
	return &Error{Kind: k, Name: name, Problem: fmt.Sprintf(format, args...)}
}

// Check returns nil if name may be given to a new entity of kind k, and an
// *Error saying what is wrong otherwise.
func Check(k Kind, name string) error {
	if e := check(k, name); e != nil {
		return e
	}
	return nil
}

func check(k Kind, name string) *Error {
	switch k {
	case Entity:
		return checkEntity(name)
	case Subscription:
		return checkChild(k, name, MaxSubscriptionLength)
	case Rule:
		if strings.EqualFold(name, DefaultRule) {
			return nil
		}
		return checkChild(k, name, MaxRuleLength)
	}
	return invalid(k, name, "unknown kind of name")
}

func checkEntity(name string) *Error {
	const k = Entity
	if e := checkCommon(k, name, MaxEntityLength, true); e != nil {
		return e
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "":
			return invalid(k, name, "it has an empty path segment")
		case seg == "." || seg == "..":
			return invalid(k, name, "it has the path segment %q", seg)
		case strings.EqualFold(seg, reservedSegment):
			return invalid(k, name, "it has the path segment %q, which is reserved for subscription paths", seg)
		}
	}
	return nil
}

func checkChild(k Kind, name string, maxLen int) *Error {
	return checkCommon(k, name, maxLen, false)
}

// checkCommon checks length, characters and the first and last character.
func checkCommon(k Kind, name string, maxLen int, slash bool) *Error {
	if name == "" {
		return invalid(k, name, "it is empty")
	}
	if !utf8.ValidString(name) {
		return invalid(k, name, "it is not valid UTF-8")
	}
	for _, r := range name {
		if !allowed(r, slash) {
			return invalid(k, name, "it contains %q, which Service Bus does not allow in names", r)
		}
	}
	if len(name) > maxLen {
		return invalid(k, name, "it is %d characters long; at most %d are allowed", len(name), maxLen)
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return invalid(k, name, "it must start and end with a letter or digit")
	}
	return nil
}

func allowed(r rune, slash bool) bool {
	return r < utf8.RuneSelf && alnum(byte(r)) || r == '.' || r == '-' || r == '_' || slash && r == '/'
}

func alnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// CheckExisting returns nil if name may name an existing entity of kind k:
// one the rule accepts, or one an earlier Busbar created under its looser
// rule (see the package doc). Lookups use it so such entities stay
// manageable; creation uses Check.
func CheckExisting(k Kind, name string) error {
	if check(k, name) == nil {
		return nil
	}
	var e *Error
	switch k {
	case Entity:
		e = legacyEntity(name)
	case Subscription:
		e = legacyChild(k, name, MaxSubscriptionLength, false)
	case Rule:
		e = legacyChild(k, name, MaxRuleLength, true)
	default:
		e = invalid(k, name, "unknown kind of name")
	}
	if e != nil {
		return e
	}
	return nil
}

// legacyEntity is the queue and topic rule before this package: 1–260
// ASCII letters, digits, '.', '-', '_' and '/', no empty segment (so no
// '/' at either end), no Subscriptions segment.
func legacyEntity(name string) *Error {
	const k = Entity
	if name == "" {
		return invalid(k, name, "it is empty")
	}
	if len(name) > MaxEntityLength {
		return invalid(k, name, "it is %d characters long; at most %d are allowed", len(name), MaxEntityLength)
	}
	if !utf8.ValidString(name) {
		return invalid(k, name, "it is not valid UTF-8")
	}
	for _, r := range name {
		if !allowed(r, true) {
			return invalid(k, name, "it contains %q, which Service Bus does not allow in names", r)
		}
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" {
			return invalid(k, name, "it has an empty path segment")
		}
		if strings.EqualFold(seg, reservedSegment) {
			return invalid(k, name, "it has the path segment %q, which is reserved for subscription paths", seg)
		}
	}
	return nil
}

// legacyChild is the subscription and rule rule before this package: 1–50
// characters, none of them '/', '\', '?', '#', '@', '*' or a control
// character; only a rule may start with '$'.
func legacyChild(k Kind, name string, maxLen int, dollar bool) *Error {
	if name == "" {
		return invalid(k, name, "it is empty")
	}
	if !utf8.ValidString(name) {
		return invalid(k, name, "it is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(name); n > maxLen {
		return invalid(k, name, "it is %d characters long; at most %d are allowed", n, maxLen)
	}
	if name[0] == '$' && !dollar {
		return invalid(k, name, "it starts with '$'")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`/\?#@*`, r) {
			return invalid(k, name, "it contains %q, which Service Bus does not allow in names", r)
		}
	}
	return nil
}
