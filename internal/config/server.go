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
	LogFormat    string // "text" or "json"
	LogLevel     string // "debug", "info", "warn" or "error"

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
	// MinFreeBytes and MinFreePercent are the low-disk watermark
	// (--min-free-disk, see ParseMinFreeDisk); both zero is "auto".
	MinFreeBytes   int64
	MinFreePercent float64

	// Faults turns fault injection on (/$faults in the admin API): for
	// tests only, never on unless asked for.
	Faults bool
}

// Server defaults.
const (
	DefaultDataDir   = "./busbar-data"
	DefaultAMQPAddr  = "localhost:5672"
	DefaultHTTPAddr  = "localhost:5300"
	DefaultLogFormat = "text"
	DefaultLogLevel  = "info"

	DefaultEntra         = "auto"
	DefaultEntraDevRole  = "owner"
	DefaultOIDCClockSkew = 5 * time.Minute

	// Generous on purpose: the emulator's cap of 10 connections is its
	// users' most common complaint.
	DefaultMaxConnections = 10000
	DefaultMaxLinks       = 4096
	DefaultMaxSessions    = 256

	DefaultMaxUnauthenticatedConnections = 64
	DefaultAuthTimeout                   = 60 * time.Second
	DefaultHandshakeTimeout              = 10 * time.Second
	DefaultMaxUnsettledPerLink           = 5000

	// DefaultMinFreeDisk: 1 GiB or 5 % of the disk, whichever is smaller.
	DefaultMinFreeDisk = "auto"
)

// DefaultServer returns the settings busbar serve uses when nothing is set.
func DefaultServer() Server {
	return Server{
		DataDir:   DefaultDataDir,
		AMQPAddr:  DefaultAMQPAddr,
		HTTPAddr:  DefaultHTTPAddr,
		LogFormat: DefaultLogFormat,
		LogLevel:  DefaultLogLevel,

		Entra:         DefaultEntra,
		EntraDevRole:  DefaultEntraDevRole,
		OIDCClockSkew: DefaultOIDCClockSkew,

		MaxConnections: DefaultMaxConnections,
		MaxLinks:       DefaultMaxLinks,
		MaxSessions:    DefaultMaxSessions,

		MaxUnauthenticatedConnections: DefaultMaxUnauthenticatedConnections,
		AuthTimeout:                   DefaultAuthTimeout,
		HandshakeTimeout:              DefaultHandshakeTimeout,
		MaxUnsettledPerLink:           DefaultMaxUnsettledPerLink,
	}
}

// Setting describes one server setting: the name of its command-line flag
// (and of Server.Set), its environment variable, its default as text and a
// usage line. Bool settings are boolean flags (--memory, --memory=false).
type Setting struct {
	Name    string
	Env     string
	Default string
	Usage   string
	Bool    bool
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
func ServerSettings() []Setting {
	return []Setting{
		{Name: "config", Env: "BUSBAR_CONFIG", Usage: "emulator Config.json declaring namespaces, queues, topics, subscriptions and rules"},
		{Name: "config-search", Env: "BUSBAR_CONFIG_SEARCH", Usage: "Config.json paths separated by ':'; without --config the first that exists is loaded, none is fine"},
		{Name: "data", Env: "BUSBAR_DATA", Default: DefaultDataDir, Usage: "data directory"},
		{Name: "amqp", Env: "BUSBAR_AMQP", Default: DefaultAMQPAddr, Usage: "AMQP listen address (host:port)"},
		{Name: "http", Env: "BUSBAR_HTTP", Default: DefaultHTTPAddr, Usage: "HTTP listen address (host:port): health, admin API, AMQP over WebSockets at /$servicebus/websocket"},
		{Name: "memory", Env: "BUSBAR_MEMORY", Default: "false", Usage: "keep all data in memory (nothing is written to disk)", Bool: true},
		{Name: "log-format", Env: "BUSBAR_LOG_FORMAT", Default: DefaultLogFormat, Usage: "log format: text or json"},
		{Name: "log-level", Env: "BUSBAR_LOG_LEVEL", Default: DefaultLogLevel, Usage: "log level: debug, info, warn or error"},
		{Name: "amqps", Env: "BUSBAR_AMQPS", Usage: "AMQP over TLS listen address (host:port; 5671 by convention); off when empty"},
		{Name: "https", Env: "BUSBAR_HTTPS", Usage: "HTTPS listen address (host:port): admin API and AMQP over WebSockets over TLS; off when empty"},
		{Name: "tls-cert", Env: "BUSBAR_TLS_CERT", Usage: "PEM certificate file for --amqps and --https"},
		{Name: "tls-key", Env: "BUSBAR_TLS_KEY", Usage: "PEM private key file for --amqps and --https"},
		{Name: "dev-tls", Env: "BUSBAR_DEV_TLS", Default: "false", Usage: "create a self-signed certificate for localhost in the data directory and use it", Bool: true},
		{Name: "policies", Env: "BUSBAR_POLICIES", Usage: `shared access policies replacing the default: "NAME=KEY[:Manage|Send,Listen];..."`},
		{Name: "allow-any-key", Env: "BUSBAR_ALLOW_ANY_KEY", Default: "false", Usage: "accept tokens signed with any key, as the emulator is assumed to (no authentication)", Bool: true},
		{Name: "entra", Env: "BUSBAR_ENTRA", Default: DefaultEntra, Usage: "Entra ID (JWT) tokens: auto (oidc with --oidc-issuer, dev with the emulator key or --allow-any-key, else off), off, dev (signatures unchecked) or oidc"},
		{Name: "entra-dev-role", Env: "BUSBAR_ENTRA_DEV_ROLE", Default: DefaultEntraDevRole, Usage: "role of a development-mode token without a roles claim (DefaultAzureCredential's): owner, sender, receiver or none"},
		{Name: "oidc-issuer", Env: "BUSBAR_OIDC_ISSUER", Usage: "OpenID Connect issuer URLs whose keys sign accepted Entra ID tokens, comma-separated (e.g. https://login.microsoftonline.com/TENANT/v2.0)"},
		{Name: "oidc-audience", Env: "BUSBAR_OIDC_AUDIENCE", Usage: "audiences accepted besides https://servicebus.azure.net and the namespace's URLs, comma-separated"},
		{Name: "oidc-tenant", Env: "BUSBAR_OIDC_TENANT", Usage: "tenant ids (tid) accepted, comma-separated; any when empty"},
		{Name: "oidc-clock-skew", Env: "BUSBAR_OIDC_CLOCK_SKEW", Default: DefaultOIDCClockSkew.String(), Usage: "tolerance on the exp and nbf of OIDC-verified tokens (Go duration)"},
		{Name: "max-connections", Env: "BUSBAR_MAX_CONNECTIONS", Default: strconv.Itoa(DefaultMaxConnections), Usage: "most concurrent AMQP connections (0: unlimited)"},
		{Name: "max-links", Env: "BUSBAR_MAX_LINKS", Default: strconv.Itoa(DefaultMaxLinks), Usage: "most links attached on one AMQP connection (0: unlimited)"},
		{Name: "max-sessions", Env: "BUSBAR_MAX_SESSIONS", Default: strconv.Itoa(DefaultMaxSessions), Usage: "most sessions on one AMQP connection, advertised as channel-max (0: unlimited)"},
		{Name: "max-unauthenticated-connections", Env: "BUSBAR_MAX_UNAUTHENTICATED_CONNECTIONS", Default: strconv.Itoa(DefaultMaxUnauthenticatedConnections), Usage: "most AMQP connections without a valid token yet, at most a quarter of --max-connections; beyond it the oldest is closed (0: no separate budget)"},
		{Name: "auth-timeout", Env: "BUSBAR_AUTH_TIMEOUT", Default: DefaultAuthTimeout.String(), Usage: "close an AMQP connection that has not put a valid $cbs token this long after open (0: never)"},
		{Name: "max-unsettled-per-link", Env: "BUSBAR_MAX_UNSETTLED_PER_LINK", Default: strconv.Itoa(DefaultMaxUnsettledPerLink), Usage: "most peek-lock deliveries a receiver link holds unsettled; then it waits for settlements or expired locks"},
		{Name: "handshake-timeout", Env: "BUSBAR_HANDSHAKE_TIMEOUT", Default: DefaultHandshakeTimeout.String(), Usage: "close an AMQP connection whose protocol header, SASL and open exchange takes longer"},
		{Name: "salvage", Env: "BUSBAR_SALVAGE", Default: "false", Usage: "open a damaged data directory, dropping records that cannot be read", Bool: true},
		{Name: "metrics-open", Env: "BUSBAR_METRICS_OPEN", Default: "false", Usage: "serve GET /metrics without authentication (by default it needs a token granting Manage, as the admin API)", Bool: true},
		{Name: "min-free-disk", Env: "BUSBAR_MIN_FREE_DISK", Default: DefaultMinFreeDisk, Usage: `free disk space below which new messages and entities are refused, so settlements still succeed: a size ("2GiB", "500MB"), a share of the disk ("10%"), "auto" (1 GiB or 5 %, whichever is smaller) or 0 (off)`},
		{Name: "faults", Env: "BUSBAR_FAULTS", Default: "false", Usage: "allow fault injection through the admin API (/$faults, busbar fault add): for testing client retry paths, never in production", Bool: true},
		{Name: "pprof", Env: "BUSBAR_PPROF", Usage: "serve Go runtime profiles (/debug/pprof/) on this address (host:port, unauthenticated: keep it on loopback); off when empty"},
	}
}

// Set sets the setting with the given name (a Setting.Name) from text, as
// given on the command line or in the environment. Log format and level are
// case-insensitive; a boolean takes true/false, 1/0, yes/no or on/off. Set
// checks only the syntax of booleans; Validate checks the rest.
func (s *Server) Set(name, value string) error {
	switch name {
	case "config":
		s.ConfigFile = value
	case "config-search":
		s.ConfigSearch = value
	case "data":
		s.DataDir = value
	case "amqp":
		s.AMQPAddr = value
	case "http":
		s.HTTPAddr = value
	case "amqps":
		s.AMQPSAddr = value
	case "https":
		s.HTTPSAddr = value
	case "pprof":
		s.PprofAddr = value
	case "tls-cert":
		s.TLSCert = value
	case "tls-key":
		s.TLSKey = value
	case "policies":
		s.Policies = value
	case "entra":
		s.Entra = strings.ToLower(strings.TrimSpace(value))
	case "entra-dev-role":
		s.EntraDevRole = strings.TrimSpace(value)
	case "oidc-issuer":
		s.OIDCIssuers = value
	case "oidc-audience":
		s.OIDCAudiences = value
	case "oidc-tenant":
		s.OIDCTenants = value
	case "oidc-clock-skew":
		d, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil || d < 0 || d > time.Hour {
			return &FieldError{Path: name, Msg: fmt.Sprintf("%q is not a duration from 0s to 1h (e.g. 5m)", value)}
		}
		s.OIDCClockSkew = d
	case "max-connections", "max-links", "max-sessions", "max-unauthenticated-connections", "max-unsettled-per-link":
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n < 0 {
			return &FieldError{Path: name, Msg: fmt.Sprintf("%q is not a whole number ≥ 0", value)}
		}
		switch name {
		case "max-connections":
			s.MaxConnections = n
		case "max-links":
			s.MaxLinks = n
		case "max-sessions":
			s.MaxSessions = n
		case "max-unsettled-per-link":
			s.MaxUnsettledPerLink = n
		default:
			s.MaxUnauthenticatedConnections = n
		}
	case "auth-timeout", "handshake-timeout":
		d, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil || d < 0 {
			return &FieldError{Path: name, Msg: fmt.Sprintf("%q is not a duration ≥ 0 (such as 60s or 1m)", value)}
		}
		if name == "auth-timeout" {
			s.AuthTimeout = d
		} else {
			s.HandshakeTimeout = d
		}
	case "memory", "dev-tls", "allow-any-key", "salvage", "metrics-open", "faults":
		b, err := parseBool(value)
		if err != nil {
			return &FieldError{Path: name, Msg: err.Error()}
		}
		switch name {
		case "memory":
			s.Memory = b
		case "dev-tls":
			s.DevTLS = b
		case "allow-any-key":
			s.AllowAnyKey = b
		case "salvage":
			s.Salvage = b
		case "metrics-open":
			s.MetricsOpen = b
		case "faults":
			s.Faults = b
		}
	case "min-free-disk":
		b, p, err := ParseMinFreeDisk(value)
		if err != nil {
			return &FieldError{Path: name, Msg: err.Error()}
		}
		s.MinFreeBytes, s.MinFreePercent = b, p
	case "log-format":
		s.LogFormat = strings.ToLower(strings.TrimSpace(value))
	case "log-level":
		s.LogLevel = strings.ToLower(strings.TrimSpace(value))
		if s.LogLevel == "warning" {
			s.LogLevel = "warn"
		}
	default:
		return &FieldError{Path: name, Msg: "unknown setting"}
	}
	return nil
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
// are setting names.
func (s Server) Validate() error {
	var errs ErrorList
	add := func(name, format string, args ...any) {
		errs = append(errs, &FieldError{Path: name, Msg: fmt.Sprintf(format, args...)})
	}
	if !s.Memory && strings.TrimSpace(s.DataDir) == "" {
		add("data", "is required unless memory is set")
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
	if _, err := s.PolicyList(); err != nil {
		add("policies", "%s", err.Error())
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
	return errs.err()
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
		return 0, 0, fmt.Errorf(`%q is not a size ("2GiB", "500MB"), a percentage ("10%%"), "auto" or 0`, v)
	}
	if n == 0 {
		return -1, 0, nil
	}
	return int64(n * mult), 0, nil
}
