package filter

import (
	"fmt"
	"sort"
	"strconv"
)

// Pos is a byte offset into the source text of a filter or action,
// starting at 0.
type Pos int

// Position is a human-readable source position. Line and Column start at
// 1; Column counts characters (runes), not bytes.
type Position struct {
	Offset int // byte offset
	Line   int
	Column int
}

// String returns "line:column".
func (p Position) String() string {
	return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column)
}

// position converts a byte offset in src to a Position.
func position(src string, off Pos) Position {
	p := Position{Offset: int(off), Line: 1, Column: 1}
	for i, r := range src {
		if i >= int(off) {
			break
		}
		if r == '\n' {
			p.Line++
			p.Column = 1
		} else {
			p.Column++
		}
	}
	return p
}

// Error is a compile-time (syntax or binding) error at a source position.
type Error struct {
	Pos Position
	Msg string
}

// Error returns "filter: line:col: msg".
func (e *Error) Error() string {
	return "filter: " + e.Pos.String() + ": " + e.Msg
}

// ErrorList is the list of errors found while compiling one filter or
// action, in source order. A non-empty ErrorList is what CompileSQL and
// CompileAction return as their error.
type ErrorList []*Error

// Add appends an error.
func (l *ErrorList) Add(pos Position, msg string) {
	*l = append(*l, &Error{Pos: pos, Msg: msg})
}

// Len, Less and Swap implement sort.Interface, ordering by offset.
func (l ErrorList) Len() int           { return len(l) }
func (l ErrorList) Swap(i, j int)      { l[i], l[j] = l[j], l[i] }
func (l ErrorList) Less(i, j int) bool { return l[i].Pos.Offset < l[j].Pos.Offset }

// Sort sorts the list by source position, keeping the order of errors at
// the same position.
func (l ErrorList) Sort() { sort.Stable(l) }

// Error returns the first error, noting how many more there are.
func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	case 2:
		return l[0].Error() + " (and 1 more error)"
	}
	return fmt.Sprintf("%s (and %d more errors)", l[0], len(l)-1)
}

// Err returns nil for an empty list and the list otherwise.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// Exception type names carried by EvalError.Type. Service Bus dead-letters
// a message whose filter evaluation fails with DeadLetterReason set to the
// .NET exception's type name and DeadLetterErrorDescription set to its
// message, so these names are what clients see.
//
// FilterException is the type the .NET SDK documents for "filter
// evaluation failed" (Filter.Match, and a non-existent system property).
// The arithmetic ones are the .NET runtime exceptions C# arithmetic throws;
// their messages are the runtime's own texts. Which type the service
// reports for a type mismatch is not documented: FilterException is our
// choice.
const (
	ExcFilter             = "FilterException"
	ExcRuleAction         = "RuleActionException"
	ExcDivideByZero       = "DivideByZeroException"
	ExcOverflow           = "OverflowException"
	ExcArgumentOutOfRange = "ArgumentOutOfRangeException"
)

// EvalError is a failure while evaluating a filter or applying an action to
// one message. The broker dead-letters with Reason = Type and Description =
// Message when the subscription has DeadLetteringOnFilterEvaluationExceptions
// set, and otherwise treats the rule as not matching.
type EvalError struct {
	Type    string // .NET exception type name, one of the Exc constants
	Message string
}

// Error returns "filter: Type: Message".
func (e *EvalError) Error() string {
	return "filter: " + e.Type + ": " + e.Message
}

func evalErrorf(typ, format string, args ...any) *EvalError {
	return &EvalError{Type: typ, Message: fmt.Sprintf(format, args...)}
}

func errDivideByZero() *EvalError {
	return &EvalError{Type: ExcDivideByZero, Message: "Attempted to divide by zero."}
}

func errOverflow() *EvalError {
	return &EvalError{Type: ExcOverflow, Message: "Arithmetic operation resulted in an overflow."}
}

func errTimeSpanOverflow() *EvalError {
	return &EvalError{Type: ExcOverflow, Message: "TimeSpan overflowed because the duration is too long."}
}

func errDateRange() *EvalError {
	return &EvalError{Type: ExcArgumentOutOfRange, Message: "The added or subtracted value results in an un-representable DateTime."}
}
