package filter

import (
	"maps"
	"math"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/busbarmq/busbar/internal/message"
)

// Action is a compiled SQL rule action. It is immutable and safe for
// concurrent use.
type Action struct {
	text  string
	stmts []Stmt
}

// CompileAction parses SQL rule action text (SET and REMOVE statements,
// optionally separated by ';') and binds its @parameters from params. At
// most MaxStatements statements are allowed; a statement may not change a
// read-only system property.
func CompileAction(text string, params map[string]any) (*Action, error) {
	stmts, err := parseAction(text)
	if err != nil {
		return nil, err
	}
	for _, s := range stmts {
		if err := bind(text, s, params); err != nil {
			return nil, err
		}
	}
	return &Action{text: text, stmts: stmts}, nil
}

// Text returns the action text as it was compiled.
func (a *Action) Text() string { return a.text }

// String returns the canonical text of the action: its statements joined
// by "; ".
func (a *Action) String() string {
	parts := make([]string, len(a.stmts))
	for i, s := range a.stmts {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

// Statements returns the action's statements. They must not be modified.
func (a *Action) Statements() []Stmt { return a.stmts }

// Apply runs the statements in order against a copy of env.Msg and returns
// the copy; env.Msg is not modified. Each statement sees the effects of
// the ones before it. The copy has its own ApplicationProperties map
// (never nil) and, if a statement changed an annotation-backed system
// property, its own Annotations map; Body and UserID are shared with the
// original and must be treated as read-only.
//
// SET of an unknown value stores a null user property (or clears a system
// property). SET converts the value to the type of the property it
// overwrites when that loses nothing (an Int64 result into an Int32
// property, say); otherwise the property takes the value's type. System
// properties take values of their own type only (String, DateTime for
// ScheduledEnqueueTimeUtc, a positive TimeSpan for TimeToLive). A failure
// is an *EvalError.
func (a *Action) Apply(env *Env) (*message.Message, error) {
	if env == nil {
		env = &emptyEnv
	}
	m := *env.msg()
	m.ApplicationProperties = maps.Clone(m.ApplicationProperties)
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = make(map[string]any)
	}
	st := applyState{env: Env{Msg: &m, Sys: env.Sys}}
	for _, s := range a.stmts {
		var err error
		switch s := s.(type) {
		case *SetStmt:
			var v value
			if v, err = st.env.value(s.Value); err == nil {
				err = st.set(s.Prop, v)
			}
		case *RemoveStmt:
			if s.Prop.Scope == ScopeSys {
				err = st.set(s.Prop, nullValue)
			} else if key, _, ok := lookupUser(m.ApplicationProperties, s.Prop.Name); ok {
				delete(m.ApplicationProperties, key)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return &m, nil
}

type applyState struct {
	env          Env
	annotationsC bool // env.Msg.Annotations is our own copy
}

func (st *applyState) set(p *Property, v value) error {
	m := st.env.Msg
	if p.Scope != ScopeSys {
		key, old, ok := lookupUser(m.ApplicationProperties, p.Name)
		if !ok {
			key = p.Name
		}
		x, conv := toAny(v)
		if !conv {
			return evalErrorf(ExcRuleAction, "A value of type '%s' cannot be stored in user property '%s'.", v.kind, p.Name)
		}
		if ok {
			x = convertLike(x, old)
		}
		m.ApplicationProperties[key] = x
		return nil
	}
	switch p.sys {
	case sysMessageID, sysCorrelationID, sysTo, sysReplyTo, sysReplyToSessionID, sysSessionID,
		sysLabel, sysContentType, sysPartitionKey, sysViaPartitionKey:
		if !v.isNull() && v.kind != kindString {
			return sysTypeError(p, v, kindString)
		}
		s := v.s
		switch p.sys {
		case sysMessageID, sysSessionID, sysPartitionKey, sysViaPartitionKey:
			if n := utf16Len(s); n > 128 {
				return evalErrorf(ExcArgumentOutOfRange, "The value of sys.%s is %d characters long; the limit is 128.", p.Name, n)
			}
		}
		switch p.sys {
		case sysMessageID:
			m.MessageID = optID(s)
		case sysCorrelationID:
			m.CorrelationID = optID(s)
		case sysTo:
			m.To = s
		case sysReplyTo:
			m.ReplyTo = s
		case sysReplyToSessionID:
			m.ReplyToSessionID = s
		case sysSessionID:
			m.SessionID = s
		case sysLabel:
			m.Subject = s
		case sysContentType:
			m.ContentType = s
		case sysPartitionKey:
			st.setAnnotation(annPartitionKey, s, s != "")
		case sysViaPartitionKey:
			st.setAnnotation(annViaPartitionKey, s, s != "")
		}
	case sysScheduledEnqueueTimeUtc:
		if !v.isNull() && v.kind != kindDateTime {
			return sysTypeError(p, v, kindDateTime)
		}
		var t time.Time
		if !v.isNull() {
			t = v.time()
		}
		st.setAnnotation(annScheduledEnqueue, t, !v.isNull())
		st.env.Sys.ScheduledEnqueueTime = t
	case sysTimeToLive:
		if !v.isNull() && v.kind != kindTimeSpan {
			return sysTypeError(p, v, kindTimeSpan)
		}
		if !v.isNull() && v.i <= 0 {
			return evalErrorf(ExcArgumentOutOfRange, "sys.TimeToLive must be positive.")
		}
		m.TTL = v.span()
		st.env.Sys.TimeToLive = v.span()
	default:
		// Rejected at compile time.
		return evalErrorf(ExcRuleAction, "sys.%s cannot be set.", p.Name)
	}
	return nil
}

func sysTypeError(p *Property, v value, want valueKind) *EvalError {
	return evalErrorf(ExcRuleAction, "A value of type '%s' cannot be assigned to sys.%s, which is of type '%s'.", v.kind, p.Name, want)
}

func (st *applyState) setAnnotation(key string, v any, present bool) {
	m := st.env.Msg
	if !st.annotationsC {
		m.Annotations = maps.Clone(m.Annotations)
		if m.Annotations == nil {
			m.Annotations = make(map[string]any)
		}
		st.annotationsC = true
	}
	if present {
		m.Annotations[key] = v
	} else {
		delete(m.Annotations, key)
	}
}

func optID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// convertLike converts a new numeric value x to the Go type of the value
// it replaces, when the conversion is exact; otherwise it returns x.
// Long on purpose: its branches are the table of numeric types, one case
// each.
func convertLike(x, old any) any {
	switch n := x.(type) {
	case int64:
		switch old.(type) {
		case int64:
			return n
		case int32:
			if n >= math.MinInt32 && n <= math.MaxInt32 {
				return int32(n)
			}
		case int16:
			if n >= math.MinInt16 && n <= math.MaxInt16 {
				return int16(n)
			}
		case int8:
			if n >= math.MinInt8 && n <= math.MaxInt8 {
				return int8(n)
			}
		case uint64:
			if n >= 0 {
				return uint64(n)
			}
		case uint32:
			if n >= 0 && n <= math.MaxUint32 {
				return uint32(n)
			}
		case uint16:
			if n >= 0 && n <= math.MaxUint16 {
				return uint16(n)
			}
		case uint8:
			if n >= 0 && n <= math.MaxUint8 {
				return uint8(n)
			}
		case float64:
			return float64(n) // C# implicit long -> double
		case float32:
			return float32(n) // C# implicit long -> float
		}
	case float64:
		if _, ok := old.(float32); ok && float64(float32(n)) == n {
			return float32(n)
		}
	case string:
		if _, ok := old.(message.Symbol); ok {
			return message.Symbol(n)
		}
	}
	return x
}
