package broker

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store"
)

// Commit pacing. A closed-loop committer — one goroutine whose commits
// never overlap, such as a busy AMQP sender link or a receiver link's
// settler — holds a handle (Sender, Settler) that owns its pacing: a
// store.Follower that the handle's calls put in their store batches
// (store.Batch.Follower). Before each call the owner says how much work it
// is committing (Pace); the handle then promises the store, or not, that
// its next commit follows this one's return at once, so that the store may
// wait for it before an fsync (the store's side of the contract is
// written down in package store, type Follower). Close ends the promise.
// Calls without a handle (Broker.Send, Broker.CompleteBatch) commit as
// plain committers that are never waited for.

// PaceWindow is how many deliveries committed at once make a handle
// promise even when the store no longer trusts it (see Sender.Pace). A
// client at a modest pace never has so many at once: 16 per fdatasync of
// ≈ 0.2 ms is 80k msg/s.
const PaceWindow = 16

// PaceBytes is PaceWindow in bytes: deliveries of that many bytes
// committed at once make a handle promise as well. Large messages rarely
// come sixteen at a time (a 64 KB sender's commits hold two or three), yet
// 256 KB per fdatasync of ≈ 0.2 ms is over 1 GB/s, no modest pace either.
const PaceBytes = 256 << 10

// pacer is a handle's pacing: its follower and the promise policy.
type pacer struct{ f store.Follower }

// pace promises the next commit while the store trusts the committer: a
// client bound by its window or its prefetch answers each commit's
// return with its next one within a round trip, and a paced client's
// next one is due within the store's wait anyway. Once the store has
// waited in vain (a client that paused), it promises only when n ≥
// PaceWindow or bytes ≥ PaceBytes (work piled up meanwhile, or a
// window's worth came at once) until the committer answers in time
// again; so an occasional committer costs the store one bounded wait, not
// one per commit.
func (p *pacer) pace(n int, bytes int64) {
	p.f.Promise(n >= PaceWindow || bytes >= PaceBytes || p.f.Trusted())
}

// Sender is a closed-loop sender's handle on a queue or topic (an AMQP
// sender link's): Send and Schedule as Broker's, committed as the
// handle's follower. Its calls must not overlap; Close when done.
type Sender struct {
	b    *Broker
	path string
	pace pacer
	by   string // who sends (SetHolder), for the message history
}

// SetHolder names the sender for the message history, e.g. "link L on
// connection C" (cut as Receiver.SetHolder's). Not safe to call
// concurrently with Send.
func (s *Sender) SetHolder(by string) { s.by = cutHolder(by) }

// NewSender returns a sender handle for path. The path is resolved by
// each call, as Broker.Send does.
func (b *Broker) NewSender(path string) *Sender { return &Sender{b: b, path: path} }

// Pace says that the next call commits n deliveries of bytes bytes in
// all (see PaceWindow, PaceBytes).
func (s *Sender) Pace(n int, bytes int64) { s.pace.pace(n, bytes) }

// Promised reports whether the handle's last Pace promised the store its
// next commit.
func (s *Sender) Promised() bool { return s.pace.f.Promised() }

// Send is Broker.Send, paced.
func (s *Sender) Send(ctx context.Context, msgs []*message.Message) error {
	_, err := s.b.enqueue(ctx, s.path, msgs, time.Time{}, false, &s.pace.f, s.by)
	return err
}

// Schedule is Broker.Schedule, paced.
func (s *Sender) Schedule(ctx context.Context, msgs []*message.Message, at time.Time) ([]int64, error) {
	return s.b.enqueue(ctx, s.path, msgs, at, true, &s.pace.f, s.by)
}

// Close tells a store waiting for the handle's next commit that none
// comes. The handle may be used again (it then paces anew).
func (s *Sender) Close() { s.pace.f.Idle() }

// Settler is a closed-loop settler's handle on a queue's or
// subscription's path (an AMQP receiver link's completions): CompleteBatch
// as Broker's, committed as the handle's follower. Its calls must not
// overlap; Close when done.
type Settler struct {
	b    *Broker
	path string
	pace pacer
}

// NewSettler returns a settler handle for path, resolved by each call.
func (b *Broker) NewSettler(path string) *Settler { return &Settler{b: b, path: path} }

// Pace says that the next call settles n deliveries (see PaceWindow).
func (s *Settler) Pace(n int) { s.pace.pace(n, 0) }

// CompleteBatch is Broker.CompleteBatch, paced.
func (s *Settler) CompleteBatch(ctx context.Context, toks []uuid.UUID) []error {
	return s.b.completeBatch(ctx, s.path, toks, &s.pace.f)
}

// Close tells a store waiting for the handle's next commit that none
// comes.
func (s *Settler) Close() { s.pace.f.Idle() }
