package servicebus

import (
	"errors"
	"strings"

	"github.com/busbarmq/busbar/internal/auth"
)

// nodeKind says what a link address names.
type nodeKind uint8

const (
	nodeEntity     nodeKind = iota // a queue (or its dead-letter sub-queue)
	nodeManagement                 // <entity>/$management
	nodeCBS                        // $cbs
)

// subQueue is the sub-queue part of an entity address.
type subQueue uint8

const (
	subNone               subQueue = iota
	subDeadLetter                  // <entity>/$DeadLetterQueue
	subTransferDeadLetter          // <entity>/$Transfer/$DeadLetterQueue
)

// address is a parsed link source or target address.
type address struct {
	kind   nodeKind
	entity string   // entity path, case as the client wrote it; "" for $cbs
	sub    subQueue // sub-queue of entity
}

// Well-known path suffixes, matched case-insensitively.
const (
	suffixManagement      = "/$management"
	suffixTransferDLQ     = "/$Transfer/$DeadLetterQueue"
	suffixDeadLetterQueue = "/$DeadLetterQueue"
	cbsNode               = "$cbs"
)

var errEmptyAddress = errors.New("the link address names no entity")

// parseAddress reduces a link address ("myqueue", "amqps://host/MyQueue",
// "q/$DeadLetterQueue", "q/$management", "$cbs") to what it names.
func parseAddress(s string) (address, error) {
	p := auth.NormalizeAudience(s)
	if strings.EqualFold(p, cbsNode) {
		return address{kind: nodeCBS}, nil
	}
	var a address
	p = "/" + p // so that a bare "$management" has its suffix too
	if rest, ok := cutSuffixFold(p, suffixManagement); ok {
		a.kind, p = nodeManagement, rest
	}
	if rest, ok := cutSuffixFold(p, suffixTransferDLQ); ok {
		a.sub, p = subTransferDeadLetter, rest
	} else if rest, ok := cutSuffixFold(p, suffixDeadLetterQueue); ok {
		a.sub, p = subDeadLetter, rest
	}
	p = strings.Trim(p, "/")
	if p == "" {
		return address{}, errEmptyAddress
	}
	a.entity = p
	return a, nil
}

// path is the address's entity path including its sub-queue, without
// $management: "q", "q/$DeadLetterQueue".
func (a address) path() string {
	switch a.sub {
	case subDeadLetter:
		return a.entity + suffixDeadLetterQueue
	case subTransferDeadLetter:
		return a.entity + suffixTransferDLQ
	}
	return a.entity
}

// String is the canonical address.
func (a address) String() string {
	switch a.kind {
	case nodeCBS:
		return cbsNode
	case nodeManagement:
		return a.path() + suffixManagement
	}
	return a.path()
}

func cutSuffixFold(s, suffix string) (string, bool) {
	if len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix) {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}
