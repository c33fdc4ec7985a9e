package broker

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/busbarmq/busbar/internal/store"
)

// Kind classifies a broker error. The AMQP and HTTP layers map each Kind to
// a condition or status in one place; the broker never speaks either.
type Kind uint8

// The kinds of broker errors.
const (
	// KindInternal is an unexpected failure (a store error, corruption).
	KindInternal Kind = iota
	// KindNotFound: the entity does not exist (or was deleted meanwhile).
	KindNotFound
	// KindMessageNotFound: a message named by sequence number is not there
	// (or not in the state the operation needs, or locked by another).
	KindMessageNotFound
	// KindAlreadyExists: an entity of that name exists.
	KindAlreadyExists
	// KindLockLost: the lock token is unknown, expired or already used.
	KindLockLost
	// KindMessageTooLarge: a message or its header exceeds a size limit.
	KindMessageTooLarge
	// KindQuotaExceeded: the entity is full (MaxSizeInMegabytes).
	KindQuotaExceeded
	// KindEntityDisabled: the entity's Status forbids the operation.
	KindEntityDisabled
	// KindInvalidArgument: a malformed name, path, property or message.
	KindInvalidArgument
	// KindNotAllowed: a valid request the entity does not permit (sending
	// to a dead-letter queue, changing an immutable property, …).
	KindNotAllowed
	// KindClosed: the broker is closed.
	KindClosed
	// KindSessionLockLost: the session lock the operation needs is not
	// held (expired, released, or never taken).
	KindSessionLockLost
	// KindSessionCannotBeLocked: the session is locked by another
	// receiver.
	KindSessionCannotBeLocked
	// KindNoSpace: the change cannot be made durable for lack of disk
	// space (the disk is full, or below the low-disk watermark for new
	// messages and entities). Nothing was changed; the same request
	// succeeds once there is space.
	KindNoSpace
	// KindStoreFailed: the store stopped after an I/O error (a failed
	// fsync) and takes no writes until the broker restarts. Nothing was
	// changed.
	KindStoreFailed
	// KindStoreUnavailable: the store's database could not be reached or
	// did not answer (store.ErrUnavailable, store.ErrOutcomeUnknown). The
	// change was not acknowledged; a send whose answer was lost may
	// still have been kept, as after a timeout in Service Bus. Retry.
	KindStoreUnavailable
	// KindMoved: another process owns the entity now (store.ErrNotOwner):
	// nothing was changed here.
	KindMoved
)

var kindNames = [...]string{
	KindInternal:        "Internal",
	KindNotFound:        "NotFound",
	KindMessageNotFound: "MessageNotFound",
	KindAlreadyExists:   "AlreadyExists",
	KindLockLost:        "LockLost",
	KindMessageTooLarge: "MessageTooLarge",
	KindQuotaExceeded:   "QuotaExceeded",
	KindEntityDisabled:  "EntityDisabled",
	KindInvalidArgument: "InvalidArgument",
	KindNotAllowed:      "NotAllowed",
	KindClosed:          "Closed",

	KindSessionLockLost:       "SessionLockLost",
	KindSessionCannotBeLocked: "SessionCannotBeLocked",
	KindNoSpace:               "NoSpace",
	KindStoreFailed:           "StoreFailed",
	KindStoreUnavailable:      "StoreUnavailable",
	KindMoved:                 "Moved",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Error is the error type of every broker operation: a Kind for the
// protocol layers and a human message (Service Bus wording where the SDKs
// or users look at it). Test for a kind with errors.Is against the
// exported sentinels (errors.Is(err, broker.ErrLockLost)) or with KindOf.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // underlying cause, if any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && int(e.Kind) < len(sentinels) && sentinels[e.Kind] == t
}

// Sentinels, one per kind, for errors.Is.
var (
	ErrInternal        = &Error{Kind: KindInternal, Msg: "broker: internal error"}
	ErrNotFound        = &Error{Kind: KindNotFound, Msg: "broker: entity not found"}
	ErrMessageNotFound = &Error{Kind: KindMessageNotFound, Msg: "broker: message not found"}
	ErrAlreadyExists   = &Error{Kind: KindAlreadyExists, Msg: "broker: entity already exists"}
	ErrLockLost        = &Error{Kind: KindLockLost, Msg: "broker: lock lost"}
	ErrMessageTooLarge = &Error{Kind: KindMessageTooLarge, Msg: "broker: message too large"}
	ErrQuotaExceeded   = &Error{Kind: KindQuotaExceeded, Msg: "broker: quota exceeded"}
	ErrEntityDisabled  = &Error{Kind: KindEntityDisabled, Msg: "broker: entity disabled"}
	ErrInvalidArgument = &Error{Kind: KindInvalidArgument, Msg: "broker: invalid argument"}
	ErrNotAllowed      = &Error{Kind: KindNotAllowed, Msg: "broker: not allowed"}
	ErrClosed          = &Error{Kind: KindClosed, Msg: "broker: closed"}

	ErrSessionLockLost       = &Error{Kind: KindSessionLockLost, Msg: "broker: session lock lost"}
	ErrSessionCannotBeLocked = &Error{Kind: KindSessionCannotBeLocked, Msg: "broker: session cannot be locked"}
	ErrNoSpace               = &Error{Kind: KindNoSpace, Msg: "broker: no disk space"}
	ErrStoreFailed           = &Error{Kind: KindStoreFailed, Msg: "broker: store failed"}
	ErrStoreUnavailable      = &Error{Kind: KindStoreUnavailable, Msg: "broker: store unavailable"}
	ErrMoved                 = &Error{Kind: KindMoved, Msg: "broker: entity moved"}
)

var sentinels = [...]*Error{
	KindInternal:        ErrInternal,
	KindNotFound:        ErrNotFound,
	KindMessageNotFound: ErrMessageNotFound,
	KindAlreadyExists:   ErrAlreadyExists,
	KindLockLost:        ErrLockLost,
	KindMessageTooLarge: ErrMessageTooLarge,
	KindQuotaExceeded:   ErrQuotaExceeded,
	KindEntityDisabled:  ErrEntityDisabled,
	KindInvalidArgument: ErrInvalidArgument,
	KindNotAllowed:      ErrNotAllowed,
	KindClosed:          ErrClosed,

	KindSessionLockLost:       ErrSessionLockLost,
	KindSessionCannotBeLocked: ErrSessionCannotBeLocked,
	KindNoSpace:               ErrNoSpace,
	KindStoreFailed:           ErrStoreFailed,
	KindStoreUnavailable:      ErrStoreUnavailable,
	KindMoved:                 ErrMoved,
}

// KindOf returns the Kind of err: the Kind of the first *Error in its
// chain, KindInternal for any other non-nil error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

func errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// internal wraps a failure of the store (or another unexpected error).
// A store that refused for lack of space or has stopped gives its own
// kind and, as the message, its own text (which says why: "the broker's
// disk is full: N bytes free of M"); the context is kept for the log.
func internal(err error, format string, args ...any) *Error {
	if e := storeError(err); e != nil {
		e.Msg = e.Msg + " (" + fmt.Sprintf(format, args...) + ")"
		return e
	}
	return &Error{Kind: KindInternal, Msg: fmt.Sprintf(format, args...), Err: err}
}

// storeError is the broker error for a store refusal (no space, stopped,
// database unavailable, not the owner), nil for any other error.
func storeError(err error) *Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNoSpace):
		var ns *store.NoSpaceError
		if errors.As(err, &ns) {
			return &Error{Kind: KindNoSpace, Msg: ns.Error()}
		}
		return &Error{Kind: KindNoSpace, Msg: "the broker's disk is full"}
	case errors.Is(err, store.ErrFailed):
		// The cause without file names (the store logged those).
		cause := "I/O error"
		var errno syscall.Errno
		if errors.As(err, &errno) {
			cause = errno.Error()
		}
		return &Error{Kind: KindStoreFailed, Msg: "the broker cannot write to its disk until it is restarted: " + cause}
	case errors.Is(err, store.ErrOutcomeUnknown):
		return &Error{Kind: KindStoreUnavailable, Msg: "the broker's database did not answer; the change may or may not have been saved, retry"}
	case errors.Is(err, store.ErrUnavailable):
		return &Error{Kind: KindStoreUnavailable, Msg: "the broker's database is unavailable; nothing was changed, retry"}
	case errors.Is(err, store.ErrNameTaken):
		return &Error{Kind: KindAlreadyExists, Msg: "another node of the cluster has just created an entity of that name"}
	case errors.Is(err, store.ErrNotOwner):
		return &Error{Kind: KindMoved, Msg: "another broker process serves this entity now; nothing was changed, retry"}
	}
	return nil
}

// Service Bus wording for the errors SDKs and users recognise.
const lockLostMsg = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."

func errLockLost() *Error { return &Error{Kind: KindLockLost, Msg: lockLostMsg} }

func errEntityNotFound(name string) *Error {
	// The JS SDK recognises "The messaging entity '…' could not be found".
	return errorf(KindNotFound, "The messaging entity '%s' could not be found.", name)
}

func errClosed() *Error { return &Error{Kind: KindClosed, Msg: "broker: closed"} }
