package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/faults"
)

// Vendor conditions (docs/wire/amqp.md §8).
const (
	condLockLost       frames.Symbol = "com.microsoft:message-lock-lost"
	condTimeout        frames.Symbol = "com.microsoft:timeout"
	condEntityDisabled frames.Symbol = "com.microsoft:entity-disabled"
	condMessageMissing frames.Symbol = "com.microsoft:message-not-found"
	condEntityExists   frames.Symbol = "com.microsoft:entity-already-exists"
	condDeadLetter     frames.Symbol = "com.microsoft:dead-letter"

	condServerBusy frames.Symbol = "com.microsoft:server-busy"

	condSessionLockLost       frames.Symbol = "com.microsoft:session-lock-lost"
	condSessionCannotBeLocked frames.Symbol = "com.microsoft:session-cannot-be-locked"
)

// HTTP-style status codes of management and CBS responses.
const (
	statusOK           int32 = 200
	statusAccepted     int32 = 202
	statusNoContent    int32 = 204
	statusBadRequest   int32 = 400
	statusUnauthorized int32 = 401
	statusForbidden    int32 = 403
	statusNotFound     int32 = 404
	statusTimeout      int32 = 408
	statusConflict     int32 = 409
	statusGone         int32 = 410
	statusTooLarge     int32 = 413
	statusInternal     int32 = 500
	statusUnavailable  int32 = 503
)

// errUnauthorized is a missing or insufficient authorisation found by this
// package (a bad token is an *auth.Error).
type errUnauthorized struct{ msg string }

func (e *errUnauthorized) Error() string { return e.msg }

func unauthorized(format string, args ...any) error {
	return &errUnauthorized{msg: fmt.Sprintf(format, args...)}
}

// badRequest is a malformed request: it maps like broker.KindInvalidArgument.
func badRequest(format string, args ...any) error {
	return &broker.Error{Kind: broker.KindInvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// notFound is an unknown entity: it maps like broker.KindNotFound.
func notFound(entity string) error {
	return &broker.Error{Kind: broker.KindNotFound, Msg: entityNotFoundText(entity)}
}

// entityNotFoundText is the cloud's wording, which the JS SDK matches with
// /The messaging entity .* could not be found/ (docs/wire/amqp.md §2.4, §8).
func entityNotFoundText(entity string) string {
	return fmt.Sprintf("The messaging entity '%s' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.", entity)
}

// classify is the one mapping from errors to AMQP conditions and
// management status codes. Every error sent to a client, as a link
// refusal, a rejected outcome or a management/CBS response, goes through
// it. Conditions are chosen from those both SDKs know (docs/wire/amqp.md §8): the
// Go SDK treats an unknown link condition as a connection fault and
// retries, so client mistakes map to amqp:not-allowed, which it treats as
// final.
//
// Rule operations (only the JS and .NET rule managers send them) use the
// same mapping; docs/wire/amqp.md §11.7 leaves the cloud's exact conditions open,
// and these are our choices: a rule name already taken is
// com.microsoft:entity-already-exists / 409 (JS: MessagingEntityAlreadyExists),
// an unknown rule or subscription amqp:not-found / 404 with the "could not
// be found" text (JS: MessagingEntityNotFound), an invalid filter or action
// amqp:not-allowed / 400 whose description names the rule and the position
// ("invalid SQL filter of rule 'r': filter: 1:9: …"; the JS SDK 7.9.5
// reports GeneralError with that text), and too many filters on the topic
// amqp:resource-limit-exceeded / 403.
//
// A change the store cannot make durable (a full disk, the low-disk
// watermark, a store stopped by an I/O error) is
// amqp:resource-limit-exceeded with the store's reason ("the broker's disk
// is full: N bytes free of M"), and 503 on the management link: the Go SDK
// retries a 503 there as it is (a real retry: the request reaches the
// broker again) and then reports it, where an unknown status such as 507
// would make it tear down and rebuild the whole connection first. Not amqp:internal-error: the Go SDK retries that after
// recovering the connection, and for a settlement on the receive link
// go-amqp then finds the delivery already settled by the first attempt
// and reports success, so the application would be told that a
// settlement that failed had succeeded. The SDKs treat
// resource-limit-exceeded as final and hand it to the application.
//
// A delivery larger than the receiving client's max-message-size (the
// endpoint refuses to send it) is amqp:link:message-size-exceeded.
//
// An injected fault (package faults) maps as the failure it imitates:
// server-busy to com.microsoft:server-busy / 503 (retried by every SDK,
// counted as throttled), lock-lost to message-lock-lost / 410, a detach
// or connection close to the condition the rule chose.
func classify(err error) (frames.Symbol, int32) {
	var ae *auth.Error
	var ue *errUnauthorized
	var te *txnError
	var fe *faults.Error
	var le *frames.Error
	if cond, status, ok := classifyRelayed(err); ok {
		return cond, status
	}
	switch {
	case errors.As(err, &le) && le.Condition == frames.ErrCondMessageSizeExceeded:
		// The endpoint's own refusal: a delivery larger than the
		// client's max-message-size (uamqp attaches with 1 MiB).
		return frames.ErrCondMessageSizeExceeded, statusTooLarge
	case errors.As(err, &te):
		// Transactions (txn.go): unknown-id, rollback, timeout; a global
		// transaction is not-implemented.
		return te.cond, statusBadRequest
	case errors.As(err, &ae), errors.As(err, &ue):
		return frames.ErrCondUnauthorizedAccess, statusUnauthorized
	case errors.As(err, &fe):
		switch fe.Kind {
		case faults.ServerBusy:
			return condServerBusy, statusUnavailable
		case faults.LockLost:
			return condLockLost, statusGone
		case faults.Detach, faults.CloseConnection:
			return frames.Symbol(fe.Condition), statusUnavailable
		}
		return frames.ErrCondInternalError, statusInternal
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return condTimeout, statusTimeout
	}
	switch broker.KindOf(err) {
	case broker.KindNotFound:
		return frames.ErrCondNotFound, statusNotFound
	case broker.KindMessageNotFound:
		return condMessageMissing, statusNotFound
	case broker.KindAlreadyExists:
		return condEntityExists, statusConflict
	case broker.KindLockLost:
		return condLockLost, statusGone
	case broker.KindSessionLockLost:
		return condSessionLockLost, statusGone
	case broker.KindSessionCannotBeLocked:
		// Only ever a link refusal; the status is for completeness.
		return condSessionCannotBeLocked, statusConflict
	case broker.KindMessageTooLarge:
		return frames.ErrCondMessageSizeExceeded, statusTooLarge
	case broker.KindQuotaExceeded:
		return frames.ErrCondResourceLimitExceeded, statusForbidden
	case broker.KindEntityDisabled:
		return condEntityDisabled, statusBadRequest
	case broker.KindInvalidArgument:
		return frames.ErrCondNotAllowed, statusBadRequest
	case broker.KindNotAllowed:
		return frames.ErrCondNotAllowed, statusForbidden
	case broker.KindClosed:
		return frames.ErrCondConnectionForced, statusUnavailable
	case broker.KindNoSpace:
		return frames.ErrCondResourceLimitExceeded, statusUnavailable
	case broker.KindStoreFailed:
		return frames.ErrCondResourceLimitExceeded, statusUnavailable
	case broker.KindStoreUnavailable, broker.KindMoved:
		// The database is unreachable, or the entity is served elsewhere
		// now: retriable, as Service Bus's server-busy.
		return condServerBusy, statusUnavailable
	}
	return frames.ErrCondInternalError, statusInternal
}

// classifyRelayed is classify's part for a cluster node's relay
// (internal/relay, router.go): what an entity's owner answered, passed on
// as it is, and a relay that could not reach the owner.
func classifyRelayed(err error) (frames.Symbol, int32, bool) {
	var re *RemoteError
	var or *OwnerRefusal
	var le *frames.Error
	switch {
	case errors.As(err, &re):
		// The owner's answer, relayed: its condition.
		status := re.Status
		if status == 0 {
			status = statusBadRequest
		}
		return re.Condition, status, true
	case errors.As(err, &or):
		// The owner of a relayed request refused it: its condition as it
		// is, with the status a local refusal of that kind has.
		return or.Condition, ownerStatus(or.Condition), true
	case errors.As(err, &le) && le.Condition == condServerBusy:
		// The relay could not reach the entity's owner: retriable.
		return condServerBusy, statusUnavailable, true
	}
	return "", 0, false
}

// ownerStatus is the management status of an owner's refusal (an
// OwnerRefusal), by its condition: the statuses classify gives the same
// conditions.
func ownerStatus(cond frames.Symbol) int32 {
	switch cond {
	case frames.ErrCondNotFound, condMessageMissing:
		return statusNotFound
	case frames.ErrCondUnauthorizedAccess:
		return statusUnauthorized
	case condEntityExists:
		return statusConflict
	case condLockLost, condSessionLockLost:
		return statusGone
	case condServerBusy, frames.ErrCondConnectionForced:
		return statusUnavailable
	case condTimeout:
		return statusTimeout
	case frames.ErrCondNotAllowed, condEntityDisabled:
		return statusBadRequest
	case frames.ErrCondResourceLimitExceeded:
		return statusForbidden
	}
	return statusInternal
}

// detached is f as the error with which the broker detaches a link that
// was working (its entity moved to another node of a cluster,
// or the database became unreachable): a retriable server-busy there is
// amqp:link:detach-forced. Server-busy tells a client to retry the same
// operation on the same link: in vain for a sender, and the Go SDK's
// message releaser, which goes on receiving on a receive link between
// ReceiveMessages calls, loops on the dead link at full speed. Detach-forced makes every SDK recover the
// link: it attaches again, reaching the entity's new owner.
func detached(f failure) failure {
	if f.cond == condServerBusy {
		f.cond = frames.ErrCondDetachForced
	}
	return f
}

// failure is an error prepared for a client: condition, status and a
// description ending with the cloud's tracking suffix.
type failure struct {
	cond       frames.Symbol
	status     int32
	desc       string
	trackingID string
}

// amqpError is the failure as an AMQP error.
func (f failure) amqpError() *frames.Error {
	return &frames.Error{Condition: f.cond, Description: f.desc}
}

// describe classifies err, builds its client description with a new
// tracking id (" TrackingId:<uuid>, SystemTracker:<namespace>:<kind>:<entity>,
// Timestamp:<UTC>"; topic says entity names a topic) and logs the failure
// with the same tracking id, so a user's report can be found in the log.
// Internal errors keep their cause out of the description.
func describe(log *slog.Logger, now time.Time, namespace, op, entity string, topic bool, err error) failure {
	f := prepare(now, namespace, entity, topic, err)
	level := slog.LevelInfo
	if f.status >= 500 {
		level = slog.LevelError
	}
	log.Log(context.Background(), level, "request failed",
		"op", op, "entity", entity, "condition", string(f.cond), "status", f.status,
		"trackingId", f.trackingID, "err", err)
	return f
}

// prepare is describe without the log line, for failures that are the
// normal course of events and could be many (a lock lost on a link).
func prepare(now time.Time, namespace, entity string, topic bool, err error) failure {
	cond, status := classify(err)
	f := failure{cond: cond, status: status, trackingID: uuid.NewString()}
	text := err.Error()
	if cond == frames.ErrCondInternalError {
		text = "An internal error occurred."
	}
	text = strings.TrimSpace(text)
	if text != "" && !strings.HasSuffix(text, ".") {
		text += "."
	}
	tracker := namespace
	if entity != "" {
		tracker += ":" + trackerEntity(entity, topic)
	}
	f.desc = fmt.Sprintf("%s TrackingId:%s, SystemTracker:%s, Timestamp:%s",
		text, f.trackingID, tracker, now.UTC().Format("2006-01-02T15:04:05"))
	return f
}
