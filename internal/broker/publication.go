package broker

import "sync/atomic"

// Lock-free publication. A committed send is made visible by whoever
// next holds the entity's mutex, so that a sender need not take it: the
// sender pushes its batch on a pubStack, and every holder of the mutex
// takes the stack first (entity.lockAndPublish, topic.lockAndPublish).
//
// The stack's invariant, tested on its own (publication_test.go): every
// pushed node is taken exactly once, by one take; take returns the nodes
// pushed since the previous take, oldest first (so the nodes of one
// pusher come out in its order), each with depth = the number of nodes
// that were on the stack below it when it was pushed.

// pubNode is one pushed value; a pusher may embed it in a larger
// allocation (see sendOne).
type pubNode[T any] struct {
	v     T
	depth int32 // nodes below this one when pushed
	next  *pubNode[T]
}

// pubStack is a lock-free (Treiber) stack of committed sends.
type pubStack[T any] struct{ top atomic.Pointer[pubNode[T]] }

// push puts n on the stack and returns how many nodes were already there.
func (s *pubStack[T]) push(n *pubNode[T]) int32 {
	for {
		old := s.top.Load()
		n.next, n.depth = old, 0
		if old != nil {
			n.depth = old.depth + 1
		}
		if s.top.CompareAndSwap(old, n) {
			return n.depth
		}
	}
}

// pending reports whether something waits to be taken.
func (s *pubStack[T]) pending() bool { return s.top.Load() != nil }

// take empties the stack and returns its nodes as a list, oldest first
// (linked by next; nil when it was empty).
func (s *pubStack[T]) take() *pubNode[T] {
	if s.top.Load() == nil {
		return nil
	}
	var prev *pubNode[T]
	for n := s.top.Swap(nil); n != nil; {
		next := n.next
		n.next, prev, n = prev, n, next
	}
	return prev
}

// publication is a receiving entity's lock-free publication: the stack of
// committed sends and the count of receivers waiting to be woken.
//
// No wakeup is lost: a sender pushes, then reads waiting (push); a
// receiver about to wait adds to waiting, then takes the stack (under the
// entity's mutex). With sequentially consistent atomics one of the two
// sees the other: the receiver finds the batch, or the sender finds a
// waiter and takes the mutex to wake it.
type publication struct {
	stack   pubStack[sendPub]
	waiting atomic.Int32 // receivers queued in the sub-queues' waiters
}

// push puts a committed send on the stack. It returns the number of
// batches that were already there and whether a receiver waits (then the
// caller takes the mutex, which publishes and wakes it).
func (p *publication) push(n *pubBatch) (depth int32, waiter bool) {
	depth = p.stack.push(n)
	return depth, p.waiting.Load() > 0
}

// sendPub is one committed send on an entity's stack: a queue's send (its
// placeholders are published) or a fan-out's copies for a subscription
// (insert: the records are added; sub may be the dead-letter queue for
// copies whose rule evaluation failed).
type sendPub struct {
	recs   []rec
	added  int64 // bytes, moved from mu.pending to mu.size when published
	sub    SubQueue
	insert bool
}

// pubBatch is a node of an entity's stack.
type pubBatch = pubNode[sendPub]

// topicPub is one committed send on a topic's stack.
type topicPub struct {
	shared []rec // shared data records to add (dc = references)
	added  int64 // bytes, leaving mu.pending
}
