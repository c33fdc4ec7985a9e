package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Server is busbar serve's own configuration.
type Server struct {
	ConfigFile string // emulator Config.json to load at start; "" for none
	// ConfigSearch lists Config.json paths separated by ':'; when
	// ConfigFile is empty the first of them that exists is loaded, and
	// none existing is not an error (the container image sets it, so that
	// a file mounted at Busbar's path or at the emulator's is found).
	ConfigSearch string
	DataDir      string // where the store keeps its files; unused with Memory
	AMQPAddr     string // host:port of the AMQP listener
	HTTPAddr     string // host:port of the management (ATOM) and health listener
	Memory       bool   // keep everything in memory, nothing on disk
	// Store is "" for the file store in DataDir, or a postgres:// (or
	// postgresql://) URL: the PostgreSQL store in that database.
	Store     string
	LogFormat string // "text" or "json"
	LogLevel  string // "debug", "info", "warn" or "error"

	AMQPSAddr string // host:port of the AMQP-over-TLS listener; "" for none
	HTTPSAddr string // host:port of the HTTPS listener; "" for none
	TLSCert   string // PEM certificate for the TLS listeners
	TLSKey    string // PEM private key for the TLS listeners
	DevTLS    bool   // make a self-signed localhost certificate in DataDir

	// Policies replaces the default shared access policy
	// (RootManageSharedAccessKey / SAS_KEY_VALUE): "NAME=KEY[:RIGHTS]"
	// entries separated by ";", RIGHTS a comma-separated list of Manage,
	// Send and Listen (default Manage).
	Policies    string
	AllowAnyKey bool // accept tokens signed with any key
	Salvage     bool // open a damaged data directory, dropping what cannot be read

	// Entra ID (JWT) tokens: Entra is "auto" (oidc with issuers, dev with
	// the emulator key or AllowAnyKey, else off), "off", "dev" or "oidc";
	// EntraDevRole the role of a development-mode token without a roles
	// claim ("owner", "sender", "receiver" or "none"); the OIDC lists are
	// comma-separated.
	Entra         string
	EntraDevRole  string
	OIDCIssuers   string
	OIDCAudiences string
	OIDCTenants   string
	OIDCClockSkew time.Duration

	MaxConnections int // concurrent AMQP connections; 0 means unlimited
	MaxLinks       int // attached links per AMQP connection; 0 means unlimited
	MaxSessions    int // sessions per AMQP connection; 0 means unlimited (65536)

	// MaxUnauthenticatedConnections is the budget of AMQP connections that
	// have not authenticated yet (at most a quarter of MaxConnections); 0
	// means no separate budget.
	MaxUnauthenticatedConnections int
	// AuthTimeout is how long an AMQP connection may stay open without a
	// valid token; 0 means no limit.
	AuthTimeout time.Duration
	// HandshakeTimeout bounds the AMQP protocol header, SASL and open
	// exchange; it must be positive.
	HandshakeTimeout time.Duration
	// MaxUnsettledPerLink bounds the deliveries a peek-lock receiver link
	// holds unsettled; at least 1.
	MaxUnsettledPerLink int

	PprofAddr string // host:port serving Go runtime profiles (/debug/pprof/); "" for none

	MetricsOpen bool // serve GET /metrics without authentication
	// Tier is the Service Bus tier whose limits apply: "basic",
	// "standard", "premium", or "" for Busbar's own profile (Standard's
	// features without its quotas).
	Tier string
	// MinFreeBytes and MinFreePercent are the low-disk watermark
	// (--min-free-disk, see ParseMinFreeDisk) below which new messages and
	// entities are refused: both zero is "auto" (1 GiB or 5 % of the disk,
	// whichever is smaller), a negative MinFreeBytes none.
	MinFreeBytes   int64
	MinFreePercent float64
	// LargeMessageThreshold is the encoded size from which a message is
	// stored in a blob file of its own rather than in the log (see
	// ParseLargeMessageThreshold): 0 is the store's default (256 KiB), a
	// negative value never.
	LargeMessageThreshold int64

	// Faults turns fault injection on (/$faults in the admin API): for
	// tests only, never on unless asked for.
	Faults bool
	// TestClock runs the broker's core on a test clock that the admin API
	// (/$time, busbar time) moves forward: for tests only, never in
	// production.
	TestClock bool

	// NamespacePerKeyName makes a SAS key name that is not a policy of
	// the default namespace select a namespace of that name, created on
	// first use with the default namespace's Config.json entities.
	NamespacePerKeyName bool
	// MaxNamespaces bounds the namespaces, Config.json's and those made
	// per key name together; 0 in server.Options means
	// DefaultMaxNamespaces.
	MaxNamespaces int
	// Message histories (/$history): History is "off", "sampled" (the
	// messages whose sequence number is a multiple of HistorySampleEvery)
	// or "on"; each entity keeps at most HistoryMessages messages, each
	// for HistoryWindow after its last event, all within
	// HistoryMaxBytes.
	History            string
	HistorySampleEvery int
	HistoryMessages    int
	HistoryWindow      time.Duration
	HistoryMaxBytes    int64
	// Cluster (docs/cluster.md): this
	// process is node NodeID of a cluster whose nodes share the
	// PostgreSQL database of Store. ClusterListen is the internal
	// listener's address and ClusterAdvertise the address other nodes
	// reach it at; ClusterSecret (at least 32 bytes) is shared by the
	// nodes. The timings are those of the node sessions: renewal
	// interval, session lifetime, how long before its expiry a node stops
	// serving on its own, and how often nodes look at the membership.
	Cluster            bool
	NodeID             string
	ClusterListen      string
	ClusterAdvertise   string
	ClusterSecret      string
	ClusterHeartbeat   time.Duration
	ClusterLeaseTTL    time.Duration
	ClusterTrustMargin time.Duration
	ClusterPoll        time.Duration
	// ClusterPark bounds how long an attach for an entity that is moving
	// between nodes is held before it fails retriably.
	ClusterPark time.Duration
}

// DefaultMaxNamespaces is the default of MaxNamespaces.
const DefaultMaxNamespaces = 64

// DefaultHTTPAddr is the HTTP listen address when none is set; busbar
// health probes it too.
const DefaultHTTPAddr = "localhost:5300"

// DefaultServer returns the settings busbar serve uses when nothing is set:
// every entry of ServerSettings at its Default.
func DefaultServer() Server {
	var s Server
	for _, st := range serverSettings {
		if st.Default == "" {
			continue
		}
		if err := st.set(&s, st.Default); err != nil {
			panic("config: the default of " + st.Name + ": " + err.Error())
		}
	}
	return s
}

// Setting describes one server setting: the name of its command-line flag
// (and of Server.Set), its environment variable, its default as text and a
// usage line. Bool settings are boolean flags (--memory, --memory=false).
// Each also knows how to parse its text into the Server field it sets.
type Setting struct {
	Name    string
	Env     string
	Default string
	Usage   string
	Bool    bool
	// Hidden settings are parsed and documented but left out of
	// busbar serve --help (the cluster's, until it is complete).
	Hidden bool

	set func(s *Server, value string) error // parses value into s
}

// ServerSettings lists the server settings in the order to show them. The
// command layer declares one flag per entry and, after parsing, calls Set for
// each flag the user gave, after FromEnv, so that flags override the
// environment:
//
//	s := config.DefaultServer()
//	if err := s.FromEnv(os.LookupEnv); err != nil { … }
//	for _, st := range config.ServerSettings() {
//		if f := cmd.Flags().Lookup(st.Name); f.Changed {
//			if err := s.Set(st.Name, f.Value.String()); err != nil { … }
//		}
//	}
//	if err := s.Validate(); err != nil { … }
//
// The Server then goes to server.Start as it is (server.Options embeds it).
func ServerSettings() []Setting { return append([]Setting(nil), serverSettings...) }

// serverSettings is the one declaration of each server setting: flag, BUSBAR_*
// variable, default, parser and the Server field it sets. Adding a setting
// is a Server field, an entry here and its use in package server; Validate
// checks what needs more than one field.
var serverSettings = []Setting{
	setting("config", "BUSBAR_CONFIG", "", "emulator Config.json declaring namespaces, queues, topics, subscriptions and rules",
		text, func(s *Server) *string { return &s.ConfigFile }),
	setting("config-search", "BUSBAR_CONFIG_SEARCH", "", "Config.json paths separated by ':'; without --config the first that exists is loaded, none is fine",
		text, func(s *Server) *string { return &s.ConfigSearch }),
	setting("data", "BUSBAR_DATA", "./busbar-data", "data directory",
		text, func(s *Server) *string { return &s.DataDir }),
	setting("amqp", "BUSBAR_AMQP", "localhost:5672", "AMQP listen address (host:port)",
		text, func(s *Server) *string { return &s.AMQPAddr }),
	setting("http", "BUSBAR_HTTP", DefaultHTTPAddr, "HTTP listen address (host:port): health, admin API, AMQP over WebSockets at /$servicebus/websocket",
		text, func(s *Server) *string { return &s.HTTPAddr }),
	setting("memory", "BUSBAR_MEMORY", "false", "keep all data in memory (nothing is written to disk)",
		parseBool, func(s *Server) *bool { return &s.Memory }),
	setting("store", "BUSBAR_STORE", "", "where data is kept: empty for the file store in --data, or a postgres://USER:PASSWORD@HOST:PORT/DB URL for PostgreSQL",
		storeURL, func(s *Server) *string { return &s.Store }),
	setting("log-format", "BUSBAR_LOG_FORMAT", "text", "log format: text or json",
		lower, func(s *Server) *string { return &s.LogFormat }),
	setting("log-level", "BUSBAR_LOG_LEVEL", "info", "log level: debug, info, warn or error",
		logLevel, func(s *Server) *string { return &s.LogLevel }),
	setting("amqps", "BUSBAR_AMQPS", "", "AMQP over TLS listen address (host:port; 5671 by convention); off when empty",
		text, func(s *Server) *string { return &s.AMQPSAddr }),
	setting("https", "BUSBAR_HTTPS", "", "HTTPS listen address (host:port): admin API and AMQP over WebSockets over TLS; off when empty",
		text, func(s *Server) *string { return &s.HTTPSAddr }),
	setting("tls-cert", "BUSBAR_TLS_CERT", "", "PEM certificate file for --amqps and --https",
		text, func(s *Server) *string { return &s.TLSCert }),
	setting("tls-key", "BUSBAR_TLS_KEY", "", "PEM private key file for --amqps and --https",
		text, func(s *Server) *string { return &s.TLSKey }),
	setting("dev-tls", "BUSBAR_DEV_TLS", "false", "create a self-signed certificate for localhost in the data directory and use it",
		parseBool, func(s *Server) *bool { return &s.DevTLS }),
	setting("policies", "BUSBAR_POLICIES", "", `shared access policies replacing the default: "NAME=KEY[:Manage|Send,Listen];..."`,
		text, func(s *Server) *string { return &s.Policies }),
	setting("allow-any-key", "BUSBAR_ALLOW_ANY_KEY", "false", "accept tokens signed with any key, as the emulator is assumed to (no authentication)",
		parseBool, func(s *Server) *bool { return &s.AllowAnyKey }),
	setting("entra", "BUSBAR_ENTRA", "auto", "Entra ID (JWT) tokens: auto (oidc with --oidc-issuer, dev with the emulator key or --allow-any-key, else off), off, dev (signatures unchecked) or oidc",
		lower, func(s *Server) *string { return &s.Entra }),
	setting("entra-dev-role", "BUSBAR_ENTRA_DEV_ROLE", "owner", "role of a development-mode token without a roles claim (DefaultAzureCredential's): owner, sender, receiver or none",
		trimmed, func(s *Server) *string { return &s.EntraDevRole }),
	setting("oidc-issuer", "BUSBAR_OIDC_ISSUER", "", "OpenID Connect issuer URLs whose keys sign accepted Entra ID tokens, comma-separated (e.g. https://login.microsoftonline.com/TENANT/v2.0)",
		text, func(s *Server) *string { return &s.OIDCIssuers }),
	setting("oidc-audience", "BUSBAR_OIDC_AUDIENCE", "", "audiences accepted besides https://servicebus.azure.net and the namespace's URLs, comma-separated",
		text, func(s *Server) *string { return &s.OIDCAudiences }),
	setting("oidc-tenant", "BUSBAR_OIDC_TENANT", "", "tenant ids (tid) accepted, comma-separated; any when empty",
		text, func(s *Server) *string { return &s.OIDCTenants }),
	setting("oidc-clock-skew", "BUSBAR_OIDC_CLOCK_SKEW", "5m0s", "tolerance on the exp and nbf of OIDC-verified tokens (Go duration)",
		clockSkew, func(s *Server) *time.Duration { return &s.OIDCClockSkew }),
	// Generous on purpose: the emulator's cap of 10 connections is its
	// users' most common complaint.
	setting("max-connections", "BUSBAR_MAX_CONNECTIONS", "10000", "most concurrent AMQP connections (0: unlimited)",
		count, func(s *Server) *int { return &s.MaxConnections }),
	setting("max-links", "BUSBAR_MAX_LINKS", "4096", "most links attached on one AMQP connection (0: unlimited)",
		count, func(s *Server) *int { return &s.MaxLinks }),
	setting("max-sessions", "BUSBAR_MAX_SESSIONS", "256", "most sessions on one AMQP connection, advertised as channel-max (0: unlimited)",
		count, func(s *Server) *int { return &s.MaxSessions }),
	setting("max-unauthenticated-connections", "BUSBAR_MAX_UNAUTHENTICATED_CONNECTIONS", "64", "most AMQP connections without a valid token yet, at most a quarter of --max-connections; beyond it the oldest is closed (0: no separate budget)",
		count, func(s *Server) *int { return &s.MaxUnauthenticatedConnections }),
	setting("auth-timeout", "BUSBAR_AUTH_TIMEOUT", "1m0s", "close an AMQP connection that has not put a valid $cbs token this long after open (0: never)",
		timeout, func(s *Server) *time.Duration { return &s.AuthTimeout }),
	setting("max-unsettled-per-link", "BUSBAR_MAX_UNSETTLED_PER_LINK", "5000", "most peek-lock deliveries a receiver link holds unsettled; then it waits for settlements or expired locks",
		count, func(s *Server) *int { return &s.MaxUnsettledPerLink }),
	setting("handshake-timeout", "BUSBAR_HANDSHAKE_TIMEOUT", "10s", "close an AMQP connection whose protocol header, SASL and open exchange takes longer",
		timeout, func(s *Server) *time.Duration { return &s.HandshakeTimeout }),
	setting("salvage", "BUSBAR_SALVAGE", "false", "open a damaged data directory, dropping records that cannot be read",
		parseBool, func(s *Server) *bool { return &s.Salvage }),
	setting("metrics-open", "BUSBAR_METRICS_OPEN", "false", "serve GET /metrics without authentication (by default it needs a token granting Manage, as the admin API)",
		parseBool, func(s *Server) *bool { return &s.MetricsOpen }),
	setting("faults", "BUSBAR_FAULTS", "false", "allow fault injection through the admin API (/$faults, busbar fault add): for testing client retry paths, never in production",
		parseBool, func(s *Server) *bool { return &s.Faults }),
	setting("test-clock", "BUSBAR_TEST_CLOCK", "false", "run message expiry, locks, scheduling, duplicate detection and idle deletion on a test clock moved forward through the admin API (/$time, busbar time advance): for tests only, never in production",
		parseBool, func(s *Server) *bool { return &s.TestClock }),
	settingPair("min-free-disk", "BUSBAR_MIN_FREE_DISK", "auto", `free disk space below which new messages and entities are refused, so settlements still succeed: a size ("2GiB", "500MB"), a share of the disk ("10%"), "auto" (1 GiB or 5 %, whichever is smaller) or 0 (off)`,
		ParseMinFreeDisk, func(s *Server) (*int64, *float64) { return &s.MinFreeBytes, &s.MinFreePercent }),
	setting("large-message-threshold", "BUSBAR_LARGE_MESSAGE_THRESHOLD", "256KiB", `messages at least this large (encoded) are stored each in a file of its own, outside the log, which compaction never copies: a size ("1MiB", "300KB"), or 0 (never)`,
		ParseLargeMessageThreshold, func(s *Server) *int64 { return &s.LargeMessageThreshold }),
	setting("tier", "BUSBAR_TIER", "", "enforce a Service Bus tier's limits and report its MessagingSKU: basic, standard or premium; empty: Standard's features without its quotas (messages up to 100 MB per entity, any number of entities)",
		lower, func(s *Server) *string { return &s.Tier }),
	setting("namespace-per-key-name", "BUSBAR_NAMESPACE_PER_KEY_NAME", "false", "a SharedAccessKeyName that is not a policy selects its own namespace, created on first use with the default namespace's Config.json entities (tokens signed with the default namespace's first Manage key): parallel test runs isolate themselves by the key name",
		parseBool, func(s *Server) *bool { return &s.NamespacePerKeyName }),
	setting("max-namespaces", "BUSBAR_MAX_NAMESPACES", strconv.Itoa(DefaultMaxNamespaces), "most namespaces, Config.json's and those made per key name together (at least 1)",
		positive, func(s *Server) *int { return &s.MaxNamespaces }),
	setting("history", "BUSBAR_HISTORY", "off", "keep message histories (/$history, busbar history): off, sampled (1 message in --history-sample-every, by sequence number) or on",
		historyMode, func(s *Server) *string { return &s.History }),
	setting("history-sample-every", "BUSBAR_HISTORY_SAMPLE_EVERY", "100", "with --history sampled, keep the history of the messages whose sequence number is a multiple of this",
		positive, func(s *Server) *int { return &s.HistorySampleEvery }),
	setting("history-messages", "BUSBAR_HISTORY_MESSAGES", "1000", "most messages whose history each queue, topic and subscription keeps (the least recently active go first)",
		positive, func(s *Server) *int { return &s.HistoryMessages }),
	setting("history-window", "BUSBAR_HISTORY_WINDOW", "1h0m0s", "how long a message's history is kept after its last event (broker clock)",
		positiveDuration, func(s *Server) *time.Duration { return &s.HistoryWindow }),
	setting("history-max-bytes", "BUSBAR_HISTORY_MAX_BYTES", "64MiB", "memory all message histories together may take, at least 1MiB (the least recently active messages go first)",
		historySize, func(s *Server) *int64 { return &s.HistoryMaxBytes }),
	setting("pprof", "BUSBAR_PPROF", "", "serve Go runtime profiles (/debug/pprof/) on this address (host:port, unauthenticated: keep it on loopback); off when empty",
		text, func(s *Server) *string { return &s.PprofAddr }),
	// The cluster (docs/cluster.md).
	setting("cluster", "BUSBAR_CLUSTER", "false", "run as a node of a cluster sharing the --store database (docs/cluster.md)",
		parseBool, func(s *Server) *bool { return &s.Cluster }),
	setting("node-id", "BUSBAR_NODE_ID", "", "this node's name in the cluster, unique among its nodes",
		trimmed, func(s *Server) *string { return &s.NodeID }),
	setting("cluster-listen", "BUSBAR_CLUSTER_LISTEN", "", "the node's internal listener (host:port) for the other nodes",
		text, func(s *Server) *string { return &s.ClusterListen }),
	setting("cluster-advertise", "BUSBAR_CLUSTER_ADVERTISE", "", "the address (host:port) other nodes reach --cluster-listen at; default --cluster-listen",
		text, func(s *Server) *string { return &s.ClusterAdvertise }),
	setting("cluster-secret", "BUSBAR_CLUSTER_SECRET", "", "the secret the nodes of one cluster share, at least 32 bytes",
		text, func(s *Server) *string { return &s.ClusterSecret }),
	setting("cluster-heartbeat", "BUSBAR_CLUSTER_HEARTBEAT", "1s", "how often a node renews its session",
		timeout, func(s *Server) *time.Duration { return &s.ClusterHeartbeat }),
	setting("cluster-lease-ttl", "BUSBAR_CLUSTER_LEASE_TTL", "5s", "how long a node's session lives without a renewal (at least 3 heartbeats)",
		timeout, func(s *Server) *time.Duration { return &s.ClusterLeaseTTL }),
	setting("cluster-trust-margin", "BUSBAR_CLUSTER_TRUST_MARGIN", "1s", "how long before its session's expiry a node without a renewal stops serving (at least a heartbeat)",
		timeout, func(s *Server) *time.Duration { return &s.ClusterTrustMargin }),
	setting("cluster-poll", "BUSBAR_CLUSTER_POLL", "1s", "how often a node looks for dead sessions and units to take or hand off",
		timeout, func(s *Server) *time.Duration { return &s.ClusterPoll }),
	setting("cluster-park", "BUSBAR_CLUSTER_PARK", "15s", "how long an attach for an entity moving between nodes waits for its new node before it fails retriably (a queue or topic list waits as long)",
		timeout, func(s *Server) *time.Duration { return &s.ClusterPark }),
}

// setting declares a setting whose text parse turns into the field that
// field points to; a bool field makes it a boolean flag. A parse error
// becomes a FieldError named after the setting.
func setting[T any](name, env, def, usage string, parse func(string) (T, error), field func(*Server) *T) Setting {
	_, isBool := any(*new(T)).(bool)
	return Setting{Name: name, Env: env, Default: def, Usage: usage, Bool: isBool,
		set: func(s *Server, v string) error {
			x, err := parse(v)
			if err != nil {
				return &FieldError{Path: name, Msg: err.Error()}
			}
			*field(s) = x
			return nil
		}}
}

// settingPair is setting for a value held in two fields.
func settingPair[T, U any](name, env, def, usage string, parse func(string) (T, U, error), fields func(*Server) (*T, *U)) Setting {
	return Setting{Name: name, Env: env, Default: def, Usage: usage,
		set: func(s *Server, v string) error {
			x, y, err := parse(v)
			if err != nil {
				return &FieldError{Path: name, Msg: err.Error()}
			}
			px, py := fields(s)
			*px, *py = x, y
			return nil
		}}
}

// The parsers of the settings table.

func text(v string) (string, error)    { return v, nil }
func trimmed(v string) (string, error) { return strings.TrimSpace(v), nil }
func lower(v string) (string, error)   { return strings.ToLower(strings.TrimSpace(v)), nil }

// storeURL is "" or a PostgreSQL URL (postgres:// or postgresql://).
func storeURL(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if _, err := url.Parse(v); err != nil || (!strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://")) {
		return "", fmt.Errorf("is not a postgres:// URL (the file store needs no --store)")
	}
	return v, nil
}

// logLevel is lower, with "warning" read as "warn".
func logLevel(v string) (string, error) {
	l, _ := lower(v)
	if l == "warning" {
		l = "warn"
	}
	return l, nil
}

// count is a whole number ≥ 0.
func count(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a whole number ≥ 0", v)
	}
	return n, nil
}

// positive is a whole number ≥ 1.
func positive(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a whole number ≥ 1", v)
	}
	return n, nil
}

// timeout is a Go duration ≥ 0.
func timeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration ≥ 0 (such as 60s or 1m)", v)
	}
	return d, nil
}

// historyMode is off, sampled or on.
func historyMode(v string) (string, error) {
	m, _ := lower(v)
	switch m {
	case "off", "sampled", "on":
		return m, nil
	}
	return "", fmt.Errorf("%q is not off, sampled or on", v)
}

// positiveDuration is a Go duration > 0.
func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration > 0 (such as 10m or 1h)", v)
	}
	return d, nil
}

// historySize is a size in bytes (units as ParseMinFreeDisk's) of at
// least 1 MiB.
func historySize(v string) (int64, error) {
	n, p, err := ParseMinFreeDisk(v)
	if err != nil || p != 0 || n < 1<<20 {
		return 0, fmt.Errorf(`%q is not a size of at least 1MiB (such as "64MiB" or "1GB")`, v)
	}
	return n, nil
}

// clockSkew is a Go duration from 0 to an hour.
func clockSkew(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 || d > time.Hour {
		return 0, fmt.Errorf("%q is not a duration from 0s to 1h (e.g. 5m)", v)
	}
	return d, nil
}

// Set sets the setting with the given name (a Setting.Name) from text, as
// given on the command line or in the environment. Log format and level are
// case-insensitive; a boolean takes true/false, 1/0, yes/no or on/off. Set
// checks only the syntax of each value; Validate checks the rest.
func (s *Server) Set(name, value string) error {
	for _, st := range serverSettings {
		if st.Name == name {
			return st.set(s, value)
		}
	}
	return &FieldError{Path: name, Msg: "unknown setting"}
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "yes", "on":
		return true, nil
	case "no", "off":
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%q is not a boolean (true or false)", v)
	}
	return b, nil
}

// FromEnv applies the BUSBAR_* environment variables found by lookup
// (os.LookupEnv in production). A variable set to the empty string counts
// as unset. Problems are reported together, each named by its variable.
func (s *Server) FromEnv(lookup func(string) (string, bool)) error {
	var errs ErrorList
	for _, st := range ServerSettings() {
		v, ok := lookup(st.Env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		if err := s.Set(st.Name, v); err != nil {
			fe := err.(*FieldError) // Set only returns *FieldError
			errs = append(errs, &FieldError{Path: st.Env, Msg: fe.Msg})
		}
	}
	return errs.err()
}

// Validate checks the settings and returns nil or an ErrorList whose paths
// are setting names: the listeners and TLS, then authentication, then
// limits and logging.
func (s Server) Validate() error {
	var errs ErrorList
	add := func(name, format string, args ...any) {
		errs = append(errs, &FieldError{Path: name, Msg: fmt.Sprintf(format, args...)})
	}
	s.validateListeners(add)
	s.validateAuth(add)
	s.validateLimits(add)
	s.validateCluster(add)
	return errs.err()
}

// MinClusterSecret is the shortest --cluster-secret, in bytes.
const MinClusterSecret = 32

// validateCluster checks the cluster settings: they need --cluster, and
// --cluster needs a PostgreSQL store, a node id, a secret and timings
// that keep the trust window inside the session (TTL at least three
// heartbeats, a margin of at least a heartbeat and below the TTL).
func (s Server) validateCluster(add func(name, format string, args ...any)) {
	if !s.Cluster {
		if s.NodeID != "" || s.ClusterListen != "" || s.ClusterAdvertise != "" || s.ClusterSecret != "" {
			add("cluster", "--node-id, --cluster-listen, --cluster-advertise and --cluster-secret need --cluster")
		}
		return
	}
	if s.Store == "" {
		add("cluster", "needs --store postgres://…: the nodes share that database")
	}
	if err := checkNodeID(s.NodeID); err != "" {
		add("node-id", "%s", err)
	}
	if len(s.ClusterSecret) < MinClusterSecret {
		add("cluster-secret", "must be at least %d bytes (it is %d)", MinClusterSecret, len(s.ClusterSecret))
	}
	if msg := checkAddr(s.ClusterListen); msg != "" {
		add("cluster-listen", "%s", msg)
	}
	if s.ClusterAdvertise != "" {
		if msg := checkAddr(s.ClusterAdvertise); msg != "" {
			add("cluster-advertise", "%s", msg)
		}
	}
	hb, ttl, margin := s.ClusterHeartbeat, s.ClusterLeaseTTL, s.ClusterTrustMargin
	switch {
	case hb <= 0:
		add("cluster-heartbeat", "must be longer than 0")
	case ttl < 3*hb:
		add("cluster-lease-ttl", "%v is less than three heartbeats (%v)", ttl, 3*hb)
	case margin < hb:
		add("cluster-trust-margin", "%v is less than a heartbeat (%v)", margin, hb)
	case margin >= ttl:
		add("cluster-trust-margin", "%v is not below the lease TTL (%v)", margin, ttl)
	}
	if s.ClusterPoll <= 0 {
		add("cluster-poll", "must be longer than 0")
	}
	if s.ClusterPark <= 0 {
		add("cluster-park", "must be longer than 0")
	}
}

// checkNodeID is "" for a usable node id, else why not: 1 to 64
// characters of letters, digits, '.', '_' and '-'.
func checkNodeID(id string) string {
	if id == "" {
		return "is required with --cluster"
	}
	if len(id) > 64 {
		return fmt.Sprintf("%q is longer than 64 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Sprintf("%q may hold only letters, digits, '.', '_' and '-'", id)
		}
	}
	return ""
}

// validateListeners checks the data directory, the listen addresses and
// what the TLS listeners need.
func (s Server) validateListeners(add func(name, format string, args ...any)) {
	if !s.Memory && s.Store == "" && strings.TrimSpace(s.DataDir) == "" {
		add("data", "is required unless memory or store is set")
	}
	if s.Memory && s.Store != "" {
		add("store", "cannot be used with memory")
	}
	for _, a := range []struct{ name, addr string }{{"amqp", s.AMQPAddr}, {"http", s.HTTPAddr}} {
		if msg := checkAddr(a.addr); msg != "" {
			add(a.name, "%s", msg)
		}
	}
	if s.AMQPAddr == s.HTTPAddr && checkAddr(s.AMQPAddr) == "" && !strings.HasSuffix(s.AMQPAddr, ":0") {
		add("http", "%q is also the AMQP address", s.HTTPAddr)
	}
	for _, a := range []struct{ name, addr string }{{"amqps", s.AMQPSAddr}, {"https", s.HTTPSAddr}, {"pprof", s.PprofAddr}} {
		if a.addr == "" {
			continue
		}
		if msg := checkAddr(a.addr); msg != "" {
			add(a.name, "%s", msg)
		}
	}
	if (s.AMQPSAddr != "" || s.HTTPSAddr != "") && !s.DevTLS && (s.TLSCert == "" || s.TLSKey == "") {
		add("tls-cert", "--amqps and --https need --tls-cert and --tls-key, or --dev-tls")
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		add("tls-key", "--tls-cert and --tls-key go together")
	}
}

// validateAuth checks the policies and the Entra ID settings.
func (s Server) validateAuth(add func(name, format string, args ...any)) {
	if _, err := s.PolicyList(); err != nil {
		add("policies", "%s", err.Error())
	}
	switch s.Tier {
	case "", "basic", "standard", "premium":
	default:
		add("tier", "%q is not a tier (basic, standard or premium)", s.Tier)
	}
	switch s.Entra {
	case "auto", "off", "dev", "oidc":
	default:
		add("entra", "%q is not an Entra ID mode (auto, off, dev or oidc)", s.Entra)
	}
	if s.Entra == "oidc" && len(SplitList(s.OIDCIssuers)) == 0 {
		add("oidc-issuer", "--entra oidc needs at least one --oidc-issuer")
	}
	for _, u := range SplitList(s.OIDCIssuers) {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			add("oidc-issuer", "%q is not an http(s) URL", u)
		}
	}
	if !isRole(s.EntraDevRole) {
		add("entra-dev-role", "%q is not a Service Bus data role (owner, sender, receiver or none)", s.EntraDevRole)
	}
}

// validateLimits checks the limits that need more than a whole number
// and the log settings.
func (s Server) validateLimits(add func(name, format string, args ...any)) {
	if s.HandshakeTimeout <= 0 {
		add("handshake-timeout", "must be longer than 0")
	}
	if s.MaxUnsettledPerLink < 1 {
		add("max-unsettled-per-link", "must be at least 1")
	}
	if s.MaxSessions > 65536 {
		add("max-sessions", "%d is more than AMQP's 65536 channels", s.MaxSessions)
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		add("log-format", "%q is not a log format (text or json)", s.LogFormat)
	}
	if _, ok := levels[s.LogLevel]; !ok {
		add("log-level", "%q is not a log level (debug, info, warn or error)", s.LogLevel)
	}
}

// EffectiveConfigFile returns the Config.json to load: ConfigFile when
// set, else the first ConfigSearch entry for which exists reports true
// (os.Stat in production), else "".
func (s Server) EffectiveConfigFile(exists func(path string) bool) string {
	if s.ConfigFile != "" {
		return s.ConfigFile
	}
	for _, p := range strings.Split(s.ConfigSearch, ":") {
		if p = strings.TrimSpace(p); p != "" && exists(p) {
			return p
		}
	}
	return ""
}

// SplitList splits a comma-separated setting, dropping empty entries.
func SplitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// isRole reports whether r names a Service Bus data role as package auth
// reads them: owner, sender, receiver (optionally as "Data Owner" or
// "Azure Service Bus Data Owner"), a role definition id, or none.
func isRole(r string) bool {
	s := strings.ToLower(strings.TrimSpace(r))
	s = strings.TrimPrefix(s, "azure service bus ")
	s = strings.TrimPrefix(s, "data ")
	switch s {
	case "", "none", "owner", "sender", "receiver",
		"090c5cfd-751d-490a-894a-3ce6f1109419", "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39", "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0":
		return true
	}
	return false
}

// checkAddr returns what is wrong with a listen address, or "".
func checkAddr(addr string) string {
	if addr == "" {
		return "is required (host:port)"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not a host:port address", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	return ""
}

var levels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// SlogLevel returns LogLevel as a slog.Level (Info for an invalid level).
func (s Server) SlogLevel() slog.Level {
	return levels[s.LogLevel]
}

// PolicySpec is one entry of Server.Policies.
type PolicySpec struct {
	Name   string
	Key    string
	Rights []string // each "Manage", "Send" or "Listen"; empty means Manage
}

// PolicyList parses Policies. An empty string gives no policies (the
// caller then uses the default one).
func (s Server) PolicyList() ([]PolicySpec, error) {
	var out []PolicySpec
	seen := map[string]bool{}
	for i, entry := range strings.Split(s.Policies, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || rest == "" {
			return nil, fmt.Errorf("entry %d %q: want NAME=KEY[:RIGHTS]", i+1, entry)
		}
		key, rights, _ := strings.Cut(rest, ":")
		if key == "" {
			return nil, fmt.Errorf("policy %q: the key is empty", name)
		}
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("policy %q is given twice", name)
		}
		seen[strings.ToLower(name)] = true
		p := PolicySpec{Name: name, Key: key}
		for _, r := range strings.Split(rights, ",") {
			r = strings.TrimSpace(r)
			if r == "" {
				continue
			}
			switch strings.ToLower(r) {
			case "manage":
				p.Rights = append(p.Rights, "Manage")
			case "send":
				p.Rights = append(p.Rights, "Send")
			case "listen":
				p.Rights = append(p.Rights, "Listen")
			default:
				return nil, fmt.Errorf("policy %q: %q is not a right (Manage, Send or Listen)", name, r)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseLargeMessageThreshold reads --large-message-threshold: a size
// ("1MiB", "300KB", a number of bytes), at least 1 KiB and at most
// 1 GiB, or 0 (off: -1).
func ParseLargeMessageThreshold(v string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(v))
	if t == "0" || t == "off" {
		return -1, nil
	}
	n, ok := parseSize(t)
	if !ok || n < 1<<10 || n > 1<<30 {
		return 0, fmt.Errorf(`%q is not a size from 1KiB to 1GiB ("256KiB", "1MB") or 0`, v)
	}
	return n, nil
}

// parseSize reads a byte count with an optional unit (KiB, MB, …; a
// lower-case t).
func parseSize(t string) (int64, bool) {
	units := []struct {
		suffix string
		mult   float64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
	}
	mult := 1.0
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || !(n >= 0 && n*mult <= 1<<62) { // NaN and Inf too
		return 0, false
	}
	return int64(n * mult), true
}

// ParseMinFreeDisk reads a low-disk watermark: "auto" (0, 0: the store's
// default, 1 GiB or 5 % of the disk, whichever is smaller), "0" or "off"
// (bytes -1: none), a percentage of the disk ("10%"), or a size in bytes
// with an optional unit (B, KB, MB, GB, TB in powers of 1000; K, KiB, M,
// MiB, G, GiB, T, TiB in powers of 1024; case-insensitive).
func ParseMinFreeDisk(v string) (bytes int64, percent float64, err error) {
	t := strings.ToLower(strings.TrimSpace(v))
	switch t {
	case "auto", "":
		return 0, 0, nil
	case "0", "off", "0%":
		return -1, 0, nil
	}
	if num, ok := strings.CutSuffix(t, "%"); ok {
		p, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || !(p >= 0 && p <= 100) { // NaN too
			return 0, 0, fmt.Errorf("%q is not a percentage between 0 and 100", v)
		}
		return 0, p, nil
	}
	n, ok := parseSize(t)
	if !ok {
		return 0, 0, fmt.Errorf(`%q is not a size ("2GiB", "500MB"), a percentage ("10%%"), "auto" or 0`, v)
	}
	if n == 0 {
		return -1, 0, nil
	}
	return n, 0, nil
}
