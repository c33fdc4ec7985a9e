package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// Error is a failure the admin layer finds itself (bad XML, a bad query
// parameter, a missing right, an unsupported path) with its HTTP status
// decided. Broker and auth errors keep their own types; httpStatus maps
// them.
type Error struct {
	Status int    // HTTP status code
	Msg    string // the sentence the client sees in <Detail>
	// Allow lists the methods a 405 answer names in its Allow header.
	Allow string
	// Bare leaves the sub-code out of <Detail>: the detail starts with
	// Msg, as Service Bus writes some errors.
	Bare bool
}

func (e *Error) Error() string { return e.Msg }

func errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// dataPlaneError is a failure of an HTTP data-plane request: httpStatus
// maps a few broker errors differently for those.
type dataPlaneError struct{ err error }

func (e *dataPlaneError) Error() string { return e.err.Error() }
func (e *dataPlaneError) Unwrap() error { return e.err }

// badRequest is a 400 for input this package rejects.
func badRequest(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, format, args...)
}

// invalidProperty is a 400 naming the property at fault, worded like
// broker.QueueProperties.Validate's errors.
func invalidProperty(name, format string, args ...any) *Error {
	return badRequest("invalid %s: %s", name, fmt.Sprintf(format, args...))
}

// httpStatus is the one place where errors become HTTP status codes (and
// the Service Bus sub-code put in front of the detail, §1.5). It also
// returns the message for <Detail>.
func httpStatus(err error) (status, subCode int, msg string) {
	var dp *dataPlaneError
	if errors.As(err, &dp) {
		// The REST runtime API (dataplane.go) documents its own statuses
		// for three broker failures; everything else is as below.
		var be *broker.Error
		if errors.As(dp.err, &be) {
			switch be.Kind {
			case broker.KindNotFound:
				return http.StatusGone, 41000, be.Error() // "queue or topic doesn't exist"
			case broker.KindMessageTooLarge, broker.KindQuotaExceeded:
				return http.StatusForbidden, 40300, be.Error() // "quota exceeded or message too large"
			case broker.KindLockLost, broker.KindMessageNotFound:
				return http.StatusNotFound, 40400, be.Error() // "no message with that lock token"
			}
		}
		err = dp.err
	}
	var ue *UnavailableError
	if errors.As(err, &ue) {
		// A unit of another node that no node answered for (moving, or
		// its node unreachable): writeError adds Retry-After.
		return http.StatusServiceUnavailable, 0, ue.Error()
	}
	var ae *Error
	if errors.As(err, &ae) {
		if ae.Bare {
			return ae.Status, 0, ae.Msg
		}
		return ae.Status, subCodeOf(ae.Status), ae.Msg
	}
	var authErr *auth.Error
	if errors.As(err, &authErr) {
		// Every token failure (missing, malformed, unknown key, bad
		// signature, expired, wrong audience) is 401, as in Service Bus.
		return http.StatusUnauthorized, 40100, authErr.Msg
	}
	var be *broker.Error
	if !errors.As(err, &be) {
		return http.StatusInternalServerError, 0, internalMsg
	}
	switch be.Kind {
	case broker.KindNotFound, broker.KindMessageNotFound:
		status = http.StatusNotFound
	case broker.KindAlreadyExists:
		status = http.StatusConflict
	case broker.KindInvalidArgument, broker.KindMessageTooLarge, broker.KindLockLost:
		status = http.StatusBadRequest
	case broker.KindNotAllowed:
		// Changing an immutable property, updating a sub-queue: the
		// service answers these with 400 Bad Request.
		status = http.StatusBadRequest
	case broker.KindQuotaExceeded:
		status = http.StatusForbidden
	case broker.KindEntityDisabled:
		return http.StatusForbidden, 40301, be.Error()
	case broker.KindClosed:
		return http.StatusServiceUnavailable, 0, "The namespace is shutting down; retry against the restarted server."
	case broker.KindNoSpace:
		// The disk is full (or below the low-disk watermark): nothing was
		// changed; the text gives the free and total bytes.
		return http.StatusInsufficientStorage, 0, be.Error()
	case broker.KindStoreFailed, broker.KindStoreUnavailable, broker.KindMoved:
		return http.StatusServiceUnavailable, 0, be.Error()
	default:
		return http.StatusInternalServerError, 0, internalMsg
	}
	return status, subCodeOf(status), be.Error()
}

// internalMsg is all a client learns of an internal failure; the server log
// has the cause under the same tracking id.
const internalMsg = "The server encountered an internal error; its log has the details under this TrackingId."

// subCodeOf is the generic Service Bus sub-code of a 4xx status (40000,
// 40400, 40900, …); 5xx answers carry none.
func subCodeOf(status int) int {
	if status >= 400 && status < 500 {
		return status * 100
	}
	return 0
}

// HTTPStatus is httpStatus for other HTTP front ends (the web console):
// the status and the sentence a user may see for err. Internal failures
// get internalMsg, never their cause.
func HTTPStatus(err error) (status int, msg string) {
	status, _, msg = httpStatus(err)
	return status, msg
}
