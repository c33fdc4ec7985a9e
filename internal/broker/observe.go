package broker

import "time"

// Observer is told of the broker's traffic, for metrics. The broker calls
// it after an operation has succeeded (durably, where it writes), on the
// caller's goroutine and outside the entity's lock: implementations must
// be fast, safe for concurrent use and must not call back into the
// broker. entity is the name of the queue, topic or subscription
// ("topic/Subscriptions/sub") as created; messages taken from or settled
// in a sub-queue count for their entity.
type Observer interface {
	// Sent: n messages were accepted by a Send or Schedule on a queue or
	// topic, whose call took d (its store commit included).
	Sent(entity string, n int, d time.Duration)
	// Delivered: n messages were handed out by a receive (receivers,
	// receive-by-sequence-number), locked or removed.
	Delivered(entity string, n int)
	// Settled: n messages were settled with outcome o by a call that took
	// d.
	Settled(entity string, o Outcome, n int, d time.Duration)
}

// Outcome is how a locked message was settled.
type Outcome uint8

// Settlement outcomes.
const (
	OutcomeComplete Outcome = iota
	OutcomeAbandon
	OutcomeRelease
	OutcomeDeadLetter
	OutcomeDefer
)

func (o Outcome) String() string {
	switch o {
	case OutcomeComplete:
		return "complete"
	case OutcomeAbandon:
		return "abandon"
	case OutcomeRelease:
		return "release"
	case OutcomeDeadLetter:
		return "deadletter"
	case OutcomeDefer:
		return "defer"
	}
	return "unknown"
}

// outcomeOf maps the internal settlement kind to its Outcome.
func outcomeOf(k settleKind) Outcome {
	switch k {
	case settleAbandon:
		return OutcomeAbandon
	case settleRelease:
		return OutcomeRelease
	case settleDeadLetter:
		return OutcomeDeadLetter
	case settleDefer:
		return OutcomeDefer
	}
	return OutcomeComplete
}

// noObserver is the Observer of a broker opened without one.
type noObserver struct{}

func (noObserver) Sent(string, int, time.Duration)             {}
func (noObserver) Delivered(string, int)                       {}
func (noObserver) Settled(string, Outcome, int, time.Duration) {}
