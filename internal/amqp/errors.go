package amqp

import (
	"errors"
	"fmt"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Error is an AMQP error: a condition symbol, a description and an
// optional info map (part 2 section 2.8.14). Handlers return one from the
// Attach callbacks to refuse a link, pass one to Close, and put one in a
// frames.Rejected outcome. It is the frames type itself, so nothing is
// converted on the way to the wire.
type Error = frames.Error

// Condition is an AMQP error condition symbol.
type Condition = frames.Symbol

// The standard conditions (part 2 sections 2.8.15 to 2.8.18) that the
// endpoint itself sends or that handlers commonly return. Vendor
// conditions (com.microsoft:...) are the glue's business.
const (
	CondInternalError         Condition = frames.ErrCondInternalError
	CondNotFound              Condition = frames.ErrCondNotFound
	CondUnauthorizedAccess    Condition = frames.ErrCondUnauthorizedAccess
	CondDecodeError           Condition = frames.ErrCondDecodeError
	CondResourceLimitExceeded Condition = frames.ErrCondResourceLimitExceeded
	CondNotAllowed            Condition = frames.ErrCondNotAllowed
	CondInvalidField          Condition = frames.ErrCondInvalidField
	CondNotImplemented        Condition = frames.ErrCondNotImplemented
	CondIllegalState          Condition = frames.ErrCondIllegalState
	CondFrameSizeTooSmall     Condition = frames.ErrCondFrameSizeTooSmall
	CondConnectionForced      Condition = frames.ErrCondConnectionForced
	CondFramingError          Condition = frames.ErrCondFramingError
	CondWindowViolation       Condition = frames.ErrCondWindowViolation
	CondHandleInUse           Condition = frames.ErrCondHandleInUse
	CondUnattachedHandle      Condition = frames.ErrCondUnattachedHandle
	CondDetachForced          Condition = frames.ErrCondDetachForced
	CondTransferLimitExceeded Condition = frames.ErrCondTransferLimitExceeded
	CondMessageSizeExceeded   Condition = frames.ErrCondMessageSizeExceeded
	CondStolen                Condition = frames.ErrCondStolen
)

// Errorf returns an *Error with the given condition and a formatted
// description.
func Errorf(cond Condition, format string, args ...any) *Error {
	return &Error{Condition: cond, Description: fmt.Sprintf(format, args...)}
}

// Sentinel errors returned by the endpoint's methods and passed to the
// detach callbacks. Test with errors.Is.
var (
	// ErrServerClosed is returned by Serve after Shutdown.
	ErrServerClosed = errors.New("amqp: server closed")

	// ErrNoCredit is returned by OutgoingLink.Send when the link has no
	// credit left.
	ErrNoCredit = errors.New("amqp: no link credit")

	// ErrLinkClosed is returned by OutgoingLink.Send once the link is
	// detached or detaching.
	ErrLinkClosed = errors.New("amqp: link closed")

	// ErrSessionEnded is passed to OnDetach callbacks when the client
	// ended the session without detaching the link first.
	ErrSessionEnded = errors.New("amqp: session ended")

	// ErrConnClosed is passed to OnDetach callbacks and Disconnected when
	// the connection ended without an AMQP error (the client closed it
	// cleanly, or the endpoint closed it without a condition).
	ErrConnClosed = errors.New("amqp: connection closed")

	// ErrConnLost means the transport failed or the peer vanished without
	// a close frame.
	ErrConnLost = errors.New("amqp: connection lost")

	// ErrAttachDeferred is returned by an Attach callback to postpone the
	// attach reply until the handler calls CompleteAttach on the link.
	ErrAttachDeferred = errors.New("amqp: attach deferred")
)

// asError turns a handler's error into the *Error sent on the wire.
// Errors that are not *Error become amqp:internal-error with the error
// text as description.
func asError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Condition: CondInternalError, Description: err.Error()}
}
