package config

import "strings"

// FieldError is one problem in a configuration: the JSON path of the value
// and what is wrong with it. Path is empty for problems with the file as a
// whole (a syntax error, for example).
type FieldError struct {
	Path string // e.g. UserConfig.Namespaces[0].Queues[2].Properties.LockDuration
	Msg  string // e.g. `"PT10M" is out of range (5 s … 5 min)`
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "config: " + e.Msg
	}
	return "config: " + e.Path + ": " + e.Msg
}

// ErrorList is the error returned for a configuration with problems: every
// problem found, in the order found, one per line. Use errors.As to get at
// it, or at the first *FieldError.
type ErrorList []*FieldError

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// err returns l as an error, or nil when it is empty.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}
