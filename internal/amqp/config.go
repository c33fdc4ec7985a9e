package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// Defaults applied by NewServer to zero Config fields.
const (
	DefaultMaxFrameSize     = 65536 // what Service Bus advertises; uamqp encodes no larger frames
	DefaultChannelMax       = 65535
	DefaultIdleTimeout      = 60 * time.Second
	DefaultLinkCredit       = 1000
	DefaultMaxMessageSize   = 262144 // 256 KiB, the Standard tier and emulator limit
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultWriteTimeout     = 30 * time.Second

	// DefaultMaxSessions bounds the sessions of one connection. The Go
	// SDK opens one session per sender or receiver and one per
	// $management link pair, so it serves about 128 of those per
	// connection.
	DefaultMaxSessions = 256

	// DefaultMaxUnauthenticated is the budget of connections that have
	// not authenticated yet (see Config.MaxUnauthenticatedConnections),
	// unless a quarter of MaxConnections is smaller.
	DefaultMaxUnauthenticated = 64

	// DefaultAuthTimeout is how long a connection may stay open without
	// authenticating (see Config.AuthTimeout).
	DefaultAuthTimeout = 60 * time.Second

	// maxSessionsBeforeAuth and maxLinksBeforeAuth bound what a
	// connection may hold until Conn.Authenticated: enough for the $cbs
	// link pairs the SDKs open before their first token (Go opens one
	// session with one pair at a time, JS one long-lived pair), little
	// enough that the unauthenticated budget holds only a few MiB.
	maxSessionsBeforeAuth = 8
	maxLinksBeforeAuth    = 16

	// maxHeartbeatInterval caps the interval between our empty frames; it
	// is safe for both SDKs whatever they advertise (docs/wire/amqp.md §1.3).
	maxHeartbeatInterval = 15 * time.Second
	minHeartbeatInterval = 20 * time.Millisecond

	// sessionWindow is the incoming-window advertised on every session.
	// The endpoint re-opens it with a session flow once half is used.
	sessionWindow = 5000

	// outgoingWindow is the outgoing-window advertised on every session.
	// The endpoint never limits itself by it, so it is large.
	outgoingWindow = 1<<31 - 1

	// closeLinger bounds how long a connection that sent close keeps
	// reading (and discarding) while the peer answers, so that the peer
	// reads the close frame before the socket is torn down.
	closeLinger = 2 * time.Second

	// writeBufferLimit is the amount of encoded frames the sessions may
	// queue ahead of the writer before they wait (back-pressure).
	writeBufferLimit = 1 << 20
)

// Config configures a Server. The zero value of each field selects its
// default.
type Config struct {
	// ContainerID is sent in the open frame. Default "busbar".
	ContainerID string

	// MaxFrameSize is the largest frame the server accepts; it is
	// advertised in open and also caps the frames the server sends
	// (which never exceed the client's value either). Default 65536,
	// what Service Bus advertises: uamqp-based clients cannot send more
	// than 64 KiB to a peer advertising more (see the package doc).
	// Must be at least 512.
	MaxFrameSize uint32

	// ChannelMax is the highest channel number a client may use.
	// Default 65535.
	ChannelMax uint16

	// IdleTimeout is advertised in open: the client must send a frame at
	// least this often. As the spec advises (part 2 section 2.4.5) it is
	// half the real threshold: a connection that sends nothing for
	// twice IdleTimeout (up to 2.5 times: the read deadline is not moved
	// before every read) is closed with amqp:resource-limit-exceeded.
	// Default 60 s; negative disables it.
	IdleTimeout time.Duration

	// MaxConnections limits concurrent connections; a client beyond the
	// limit gets open then close(amqp:resource-limit-exceeded). 0 means
	// unlimited.
	MaxConnections int

	// MaxSessions limits concurrent sessions per connection. It lowers
	// the advertised channel-max to MaxSessions-1, so a client that
	// respects channel-max cannot exceed it; a begin on a higher channel
	// closes the connection with amqp:not-allowed. Default 256
	// (DefaultMaxSessions); negative means ChannelMax+1.
	MaxSessions int

	// MaxUnauthenticatedConnections is a separate, smaller budget for
	// connections that have not authenticated yet: from accept, through
	// the handshake, until the handler calls Conn.Authenticated (the
	// Service Bus glue does on the first valid $cbs put-token) or a SASL
	// PLAIN login passed SASLConfig.ValidatePlain. They also count
	// against MaxConnections. A new connection that finds this budget
	// full, or MaxConnections reached while some connections are
	// unauthenticated, closes the oldest unauthenticated connection
	// (close(amqp:resource-limit-exceeded) if it got as far as open) and
	// takes its place: unauthenticated clients can never hold every slot,
	// and a real client that authenticates promptly gets in while an
	// attack runs. Default 64 (DefaultMaxUnauthenticated); never more
	// than a quarter of MaxConnections (at least 1) when that is set;
	// negative means no separate budget.
	MaxUnauthenticatedConnections int

	// AuthTimeout is how long a connection may stay open after its open
	// frame without authenticating; then it is closed with
	// amqp:unauthorized-access. Default 60 s (DefaultAuthTimeout);
	// negative disables it.
	AuthTimeout time.Duration

	// MaxLinks limits attached links per connection; further attaches
	// are refused with amqp:resource-limit-exceeded. 0 means unlimited.
	MaxLinks int

	// LinkCredit is the credit granted to each client sender link right
	// after attach and kept topped up. An Attach callback may change it
	// per link. Default 1000.
	LinkCredit uint32

	// MaxMessageSize is the default max-message-size of the attach reply
	// on client sender links (the Go SDK sizes batches from it; it must
	// not be 0). Larger deliveries are rejected with
	// amqp:link:message-size-exceeded. Default 262144.
	MaxMessageSize uint64

	// HandshakeTimeout bounds protocol header, SASL and open exchange;
	// a connection that has not sent its open frame by then is closed.
	// Default 10 s.
	HandshakeTimeout time.Duration

	// WriteTimeout bounds each write to the network; a client that stops
	// reading for that long (up to 1.25 times that: the deadline is not
	// moved before every write) is disconnected. Default 30 s.
	WriteTimeout time.Duration

	// SASL configures authentication.
	SASL SASLConfig

	// Logger receives connection-level events. Default slog.Default().
	Logger *slog.Logger
}

// SASLConfig configures the SASL layer. The server always offers
// MSSBCBS, ANONYMOUS and PLAIN, in that order: both Service Bus SDKs pick
// ANONYMOUS and authorise later through CBS.
type SASLConfig struct {
	// ValidatePlain checks PLAIN credentials. nil accepts any.
	ValidatePlain func(username, password string) error

	// PlainOnly offers PLAIN alone and refuses every other mechanism
	// (for a listener that is not for Service Bus clients, such as a
	// cluster's internal one). CheckPlain, when set, replaces
	// ValidatePlain: what it returns for an accepted login is kept as
	// the connection's Conn.SASLInfo.
	PlainOnly  bool
	CheckPlain func(username, password string) (info any, err error)

	// RequireSASL refuses clients that skip SASL. Off by default: like
	// Service Bus, the server also accepts the plain AMQP protocol header
	// (a client configured with a SAS token and no key name sends it) and
	// leaves authorisation to CBS. With it set, such a client is answered
	// with the SASL header and disconnected.
	RequireSASL bool
}

// withDefaults returns cfg with defaults applied, or an error for an
// unusable value.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.ContainerID == "" {
		cfg.ContainerID = "busbar"
	}
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.MaxFrameSize < frames.MinMaxFrameSize {
		return cfg, fmt.Errorf("amqp: MaxFrameSize %d below the minimum %d", cfg.MaxFrameSize, frames.MinMaxFrameSize)
	}
	if cfg.ChannelMax == 0 {
		cfg.ChannelMax = DefaultChannelMax
	}
	if cfg.MaxConnections < 0 || cfg.MaxLinks < 0 {
		return cfg, errors.New("amqp: negative limit")
	}
	switch {
	case cfg.MaxSessions == 0:
		cfg.MaxSessions = DefaultMaxSessions
	case cfg.MaxSessions < 0:
		cfg.MaxSessions = int(cfg.ChannelMax) + 1
	}
	if cfg.MaxSessions-1 < int(cfg.ChannelMax) {
		cfg.ChannelMax = uint16(cfg.MaxSessions - 1)
	}
	if cfg.MaxUnauthenticatedConnections == 0 {
		cfg.MaxUnauthenticatedConnections = DefaultMaxUnauthenticated
	}
	if q := max(cfg.MaxConnections/4, 1); cfg.MaxConnections > 0 && cfg.MaxUnauthenticatedConnections > q {
		cfg.MaxUnauthenticatedConnections = q
	}
	if cfg.AuthTimeout == 0 {
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.IdleTimeout < 0 {
		cfg.IdleTimeout = 0
	}
	if cfg.LinkCredit == 0 {
		cfg.LinkCredit = DefaultLinkCredit
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}
