package auth

import (
	"errors"
	"fmt"
)

// The kinds of validation failure. Every error Validate returns is an
// *Error wrapping exactly one of these, so errors.Is tells them apart.
var (
	// ErrMalformed: the token is not a well-formed SharedAccessSignature.
	ErrMalformed = errors.New("malformed token")
	// ErrUnknownKey: skn names no configured policy.
	ErrUnknownKey = errors.New("unknown key name")
	// ErrBadSignature: sig was not made with the policy's keys.
	ErrBadSignature = errors.New("bad signature")
	// ErrExpired: se is not in the future.
	ErrExpired = errors.New("token expired")
	// ErrWrongAudience: sr does not cover the requested audience.
	ErrWrongAudience = errors.New("wrong audience")
	// ErrNoRole: a JWT carries no Service Bus data role (or dev mode's
	// default role for tokens without roles is none).
	ErrNoRole = errors.New("no Service Bus role")
	// ErrKeysUnavailable: the signing keys of a JWT's issuer could not be
	// fetched.
	ErrKeysUnavailable = errors.New("signing keys unavailable")
	// ErrNotEnabled: the token is a JWT and Entra ID tokens are off.
	ErrNotEnabled = errors.New("token type not enabled")
)

// Error is a token validation failure: Kind is one of the Err* values
// above, Msg a sentence fit to show the client.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind, so errors.Is(err, ErrExpired) works.
func (e *Error) Unwrap() error { return e.Kind }

func newError(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
