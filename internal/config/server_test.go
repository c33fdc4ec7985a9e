package config

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestDefaultServer(t *testing.T) {
	s := DefaultServer()
	want := Server{
		DataDir: "./busbar-data", AMQPAddr: "localhost:5672", HTTPAddr: "localhost:5300",
		LogFormat: "text", LogLevel: "info", MaxConnections: 10000, MaxLinks: 4096,
		Entra: "auto", EntraDevRole: "owner", OIDCClockSkew: 5 * time.Minute,
		MaxSessions: 256, MaxUnauthenticatedConnections: 64, AuthTimeout: time.Minute, HandshakeTimeout: 10 * time.Second, MaxUnsettledPerLink: 5000,
		MaxNamespaces: DefaultMaxNamespaces,
		History:       "off", HistorySampleEvery: 100, HistoryMessages: 1000, HistoryWindow: time.Hour, HistoryMaxBytes: 64 << 20,
		LargeMessageThreshold: 256 << 10,
		ClusterHeartbeat:      time.Second, ClusterLeaseTTL: 5 * time.Second, ClusterTrustMargin: time.Second, ClusterPoll: time.Second, ClusterPark: 15 * time.Second,
	}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	// The settings table's defaults agree with DefaultServer.
	fromTable := Server{}
	for _, st := range ServerSettings() {
		if st.Default != "" {
			if err := fromTable.Set(st.Name, st.Default); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fromTable != s {
		t.Errorf("ServerSettings defaults give %+v, DefaultServer %+v", fromTable, s)
	}
}

func TestServerFromEnv(t *testing.T) {
	s := DefaultServer()
	err := s.FromEnv(env(map[string]string{
		"BUSBAR_CONFIG":     "/etc/busbar/Config.json",
		"BUSBAR_DATA":       "/var/lib/busbar",
		"BUSBAR_AMQP":       "0.0.0.0:5671",
		"BUSBAR_HTTP":       ":8080",
		"BUSBAR_MEMORY":     "yes",
		"BUSBAR_LOG_FORMAT": "JSON",
		"BUSBAR_LOG_LEVEL":  "Warning",
		"OTHER":             "ignored",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Server{
		ConfigFile: "/etc/busbar/Config.json", DataDir: "/var/lib/busbar", AMQPAddr: "0.0.0.0:5671",
		HTTPAddr: ":8080", Memory: true, LogFormat: "json", LogLevel: "warn",
		MaxConnections: 10000, MaxLinks: 4096,
		Entra: "auto", EntraDevRole: "owner", OIDCClockSkew: 5 * time.Minute,
		MaxSessions: 256, MaxUnauthenticatedConnections: 64, AuthTimeout: time.Minute, HandshakeTimeout: 10 * time.Second, MaxUnsettledPerLink: 5000,
		MaxNamespaces: DefaultMaxNamespaces,
		History:       "off", HistorySampleEvery: 100, HistoryMessages: 1000, HistoryWindow: time.Hour, HistoryMaxBytes: 64 << 20,
		LargeMessageThreshold: 256 << 10,
		ClusterHeartbeat:      time.Second, ClusterLeaseTTL: 5 * time.Second, ClusterTrustMargin: time.Second, ClusterPoll: time.Second, ClusterPark: 15 * time.Second,
	}
	if s != want {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if s.SlogLevel() != slog.LevelWarn {
		t.Errorf("SlogLevel = %v", s.SlogLevel())
	}

	// Empty variables count as unset.
	s = DefaultServer()
	if err := s.FromEnv(env(map[string]string{"BUSBAR_DATA": "", "BUSBAR_MEMORY": " "})); err != nil || s != DefaultServer() {
		t.Errorf("empty variables: %v, %+v", err, s)
	}

	// Bad values are reported together, by variable.
	s = DefaultServer()
	err = s.FromEnv(env(map[string]string{"BUSBAR_MEMORY": "maybe", "BUSBAR_DATA": "/d"}))
	if err == nil || err.Error() != `config: BUSBAR_MEMORY: "maybe" is not a boolean (true or false)` {
		t.Errorf("got %v", err)
	}
	if s.DataDir != "/d" {
		t.Errorf("good variables should still apply: %+v", s)
	}
}

func TestServerFlagsOverrideEnv(t *testing.T) {
	s := DefaultServer()
	if err := s.FromEnv(env(map[string]string{"BUSBAR_AMQP": "localhost:1", "BUSBAR_LOG_LEVEL": "debug"})); err != nil {
		t.Fatal(err)
	}
	// What the command layer does for each flag the user set.
	for name, value := range map[string]string{"amqp": "localhost:2", "memory": "true", "metrics-open": "on"} {
		if err := s.Set(name, value); err != nil {
			t.Fatal(err)
		}
	}
	if s.AMQPAddr != "localhost:2" || !s.Memory || s.LogLevel != "debug" || !s.MetricsOpen {
		t.Errorf("got %+v", s)
	}
	if err := s.Set("colour", "red"); err == nil || err.Error() != "config: colour: unknown setting" {
		t.Errorf("unknown setting: %v", err)
	}
	for _, st := range ServerSettings() {
		if !strings.HasPrefix(st.Env, "BUSBAR_") || st.Name == "" || st.Usage == "" {
			t.Errorf("incomplete setting %+v", st)
		}
	}
}

func TestServerValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Server)
		want string // "" for valid
	}{
		{"default", func(*Server) {}, ""},
		{"no data dir", func(s *Server) { s.DataDir = "" }, "config: data: is required unless memory or store is set"},
		{"store and memory", func(s *Server) { s.Memory, s.Store = true, "postgres://localhost/busbar" }, "config: store: cannot be used with memory"},
		{"memory without data dir", func(s *Server) { s.DataDir, s.Memory = "", true }, ""},
		{"amqp missing", func(s *Server) { s.AMQPAddr = "" }, "config: amqp: is required (host:port)"},
		{"amqp no port", func(s *Server) { s.AMQPAddr = "localhost" }, `config: amqp: "localhost" is not a host:port address`},
		{"http bad port", func(s *Server) { s.HTTPAddr = "localhost:http" }, `config: http: "localhost:http": port "http" is not a number from 0 to 65535`},
		{"http port too big", func(s *Server) { s.HTTPAddr = ":70000" }, `config: http: ":70000": port "70000" is not a number from 0 to 65535`},
		{"ipv6", func(s *Server) { s.AMQPAddr = "[::1]:5672" }, ""},
		{"any port twice", func(s *Server) { s.AMQPAddr, s.HTTPAddr = "localhost:0", "localhost:0" }, ""},
		{"same address", func(s *Server) { s.HTTPAddr = s.AMQPAddr }, `config: http: "localhost:5672" is also the AMQP address`},
		{"log format", func(s *Server) { s.LogFormat = "xml" }, `config: log-format: "xml" is not a log format (text or json)`},
		{"entra mode", func(s *Server) { s.Entra = "on" }, `config: entra: "on" is not an Entra ID mode (auto, off, dev or oidc)`},
		{"oidc without issuer", func(s *Server) { s.Entra = "oidc" }, `config: oidc-issuer: --entra oidc needs at least one --oidc-issuer`},
		{"oidc issuer not a URL", func(s *Server) { s.OIDCIssuers = "https://login.example/t/v2.0, login.example" }, `config: oidc-issuer: "login.example" is not an http(s) URL`},
		{"oidc", func(s *Server) { s.Entra, s.OIDCIssuers = "oidc", "https://login.example/t/v2.0" }, ""},
		{"dev role", func(s *Server) { s.EntraDevRole = "Azure Service Bus Data Receiver" }, ""},
		{"bad dev role", func(s *Server) { s.EntraDevRole = "admin" }, `config: entra-dev-role: "admin" is not a Service Bus data role (owner, sender, receiver or none)`},
		{"log level", func(s *Server) { s.LogLevel = "trace" }, `config: log-level: "trace" is not a log level (debug, info, warn or error)`},
		{"several", func(s *Server) { s.LogFormat, s.LogLevel = "", "" },
			"config: log-format: \"\" is not a log format (text or json)\nconfig: log-level: \"\" is not a log level (debug, info, warn or error)"},
	} {
		s := DefaultServer()
		tc.edit(&s)
		err := s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
		var list ErrorList
		if err != nil && !errors.As(err, &list) {
			t.Errorf("%s: %T is not an ErrorList", tc.name, err)
		}
	}
}

func TestServerTLSPoliciesAndLimits(t *testing.T) {
	s := DefaultServer()
	if err := s.FromEnv(env(map[string]string{
		"BUSBAR_AMQPS":           "localhost:5671",
		"BUSBAR_DEV_TLS":         "true",
		"BUSBAR_POLICIES":        "app=secret:Send,Listen; admin=other",
		"BUSBAR_MAX_CONNECTIONS": "50",
		"BUSBAR_MAX_LINKS":       "0",
		"BUSBAR_MAX_SESSIONS":    "16",

		"BUSBAR_MAX_UNAUTHENTICATED_CONNECTIONS": "0",
		"BUSBAR_AUTH_TIMEOUT":                    "2m",
		"BUSBAR_HANDSHAKE_TIMEOUT":               "3s",
	})); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.AMQPSAddr != "localhost:5671" || !s.DevTLS || s.MaxConnections != 50 || s.MaxLinks != 0 || s.MaxSessions != 16 ||
		s.MaxUnauthenticatedConnections != 0 || s.AuthTimeout != 2*time.Minute || s.HandshakeTimeout != 3*time.Second {
		t.Fatalf("settings = %+v", s)
	}
	ps, err := s.PolicyList()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "app" || ps[0].Key != "secret" || strings.Join(ps[0].Rights, ",") != "Send,Listen" || ps[1].Name != "admin" || len(ps[1].Rights) != 0 {
		t.Fatalf("policies = %+v", ps)
	}
	for _, tc := range []struct{ name, value, want string }{
		{"policies", "noequals", "NAME=KEY"},
		{"policies", "a=k:Fly", "not a right"},
		{"policies", "a=k;A=j", "twice"},
		{"https", "nope", "host:port"},
		{"pprof", "nope", "host:port"},
		{"tls-cert", "cert.pem", "go together"},
		{"handshake-timeout", "0s", "longer than 0"},
		{"max-sessions", "70000", "65536"},
		{"max-unsettled-per-link", "0", "at least 1"},
	} {
		s := DefaultServer()
		s.HTTPSAddr = "localhost:5301"
		s.DevTLS = true
		if err := s.Set(tc.name, tc.value); err != nil {
			t.Fatal(err)
		}
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: Validate() = %v, want an error mentioning %q", tc.name, tc.value, err, tc.want)
		}
	}
	if err := s.Set("max-connections", "-1"); err == nil {
		t.Error("negative max-connections accepted")
	}
	if err := s.Set("auth-timeout", "soon"); err == nil {
		t.Error("auth-timeout soon accepted")
	}
	if err := s.Set("store", "mysql://localhost/busbar"); err == nil {
		t.Error("a store URL that is not postgres:// accepted")
	}
	if err := s.Set("store", " postgresql://u:p@db:5432/busbar?search_path=busbar "); err != nil || s.Store != "postgresql://u:p@db:5432/busbar?search_path=busbar" {
		t.Errorf("store URL: %v, %q", err, s.Store)
	}
	s.Store = ""
	s = DefaultServer()
	s.HTTPSAddr = "localhost:5301"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "--dev-tls") {
		t.Errorf("https without a certificate: %v", err)
	}
}

func TestEffectiveConfigFile(t *testing.T) {
	present := map[string]bool{"/ServiceBus_Emulator/ConfigFiles/Config.json": true, "/config/Config.json": true}
	exists := func(p string) bool { return present[p] }
	for _, c := range []struct {
		file, search, want string
	}{
		{"", "", ""},
		{"my.json", "/config/Config.json", "my.json"}, // --config wins, even when missing
		{"", "/config/Config.json:/ServiceBus_Emulator/ConfigFiles/Config.json", "/config/Config.json"},
		{"", "/missing.json: /ServiceBus_Emulator/ConfigFiles/Config.json", "/ServiceBus_Emulator/ConfigFiles/Config.json"},
		{"", "/missing.json:/also-missing.json", ""},
	} {
		s := DefaultServer()
		s.ConfigFile, s.ConfigSearch = c.file, c.search
		if got := s.EffectiveConfigFile(exists); got != c.want {
			t.Errorf("config %q search %q: got %q, want %q", c.file, c.search, got, c.want)
		}
	}
	s := DefaultServer()
	if err := s.FromEnv(func(k string) (string, bool) {
		if k == "BUSBAR_CONFIG_SEARCH" {
			return "/a.json:/b.json", true
		}
		return "", false
	}); err != nil || s.ConfigSearch != "/a.json:/b.json" {
		t.Fatalf("BUSBAR_CONFIG_SEARCH: %v, %q", err, s.ConfigSearch)
	}
}

func TestParseMinFreeDisk(t *testing.T) {
	for _, c := range []struct {
		in      string
		bytes   int64
		percent float64
		bad     bool
	}{
		{in: "auto"}, {in: ""}, {in: "0", bytes: -1}, {in: "off", bytes: -1}, {in: "0%", bytes: -1},
		{in: "10%", percent: 10}, {in: "2.5 %", percent: 2.5},
		{in: "2GiB", bytes: 2 << 30}, {in: "500MB", bytes: 500e6}, {in: "64k", bytes: 64 << 10}, {in: "4096", bytes: 4096},
		{in: "1.5G", bytes: 3 << 29},
		{in: "-1", bad: true}, {in: "101%", bad: true}, {in: "lots", bad: true}, {in: "5 parsecs", bad: true},
	} {
		b, p, err := ParseMinFreeDisk(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || b != c.bytes || p != c.percent {
			t.Errorf("%q: %d, %v, %v; want %d, %v", c.in, b, p, err, c.bytes, c.percent)
		}
	}
	s := DefaultServer()
	if err := s.Set("min-free-disk", "10%"); err != nil || s.MinFreePercent != 10 {
		t.Fatalf("Set: %v %+v", err, s)
	}
}

func TestHistorySettings(t *testing.T) {
	s := DefaultServer()
	for name, v := range map[string]string{"history": "Sampled", "history-sample-every": "10", "history-messages": "50", "history-window": "10m", "history-max-bytes": "2MiB"} {
		if err := s.Set(name, v); err != nil {
			t.Fatalf("%s=%s: %v", name, v, err)
		}
	}
	if s.History != "sampled" || s.HistorySampleEvery != 10 || s.HistoryMessages != 50 || s.HistoryWindow != 10*time.Minute || s.HistoryMaxBytes != 2<<20 {
		t.Errorf("got %+v", s)
	}
	for name, v := range map[string]string{"history": "sometimes", "history-sample-every": "0", "history-messages": "-1", "history-window": "0s", "history-max-bytes": "10KiB"} {
		if err := s.Set(name, v); err == nil {
			t.Errorf("%s=%s accepted", name, v)
		}
	}
}

func TestParseLargeMessageThreshold(t *testing.T) {
	for in, want := range map[string]int64{"0": -1, "off": -1, "256KiB": 256 << 10, "1MB": 1e6, "4096": 4096, "1GiB": 1 << 30,
		"512": 0, "2GiB": 0, "-1": 0, "big": 0} {
		got, err := ParseLargeMessageThreshold(in)
		if want == 0 {
			if err == nil {
				t.Errorf("%q: no error", in)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestClusterSettings: the cluster flags need --cluster, which needs a
// PostgreSQL store, a node id, a long enough secret, an internal listener
// and timings that keep the trust window inside the session.
func TestClusterSettings(t *testing.T) {
	good := func() Server {
		s := DefaultServer()
		s.Store, s.Cluster, s.NodeID = "postgres://u@h/db", true, "node-1"
		s.ClusterListen, s.ClusterSecret = "127.0.0.1:0", strings.Repeat("s", MinClusterSecret)
		return s
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a good cluster configuration: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Server)
		field string
	}{
		{"no store", func(s *Server) { s.Store = "" }, "cluster"},
		{"no node id", func(s *Server) { s.NodeID = "" }, "node-id"},
		{"bad node id", func(s *Server) { s.NodeID = "a b" }, "node-id"},
		{"short secret", func(s *Server) { s.ClusterSecret = "short" }, "cluster-secret"},
		{"no listener", func(s *Server) { s.ClusterListen = "" }, "cluster-listen"},
		{"bad advertise", func(s *Server) { s.ClusterAdvertise = "nohost" }, "cluster-advertise"},
		{"ttl under 3 heartbeats", func(s *Server) { s.ClusterLeaseTTL = 2 * time.Second }, "cluster-lease-ttl"},
		{"margin under a heartbeat", func(s *Server) { s.ClusterTrustMargin = 500 * time.Millisecond }, "cluster-trust-margin"},
		{"margin not below the ttl", func(s *Server) { s.ClusterTrustMargin = 5 * time.Second }, "cluster-trust-margin"},
		{"zero poll", func(s *Server) { s.ClusterPoll = 0 }, "cluster-poll"},
		{"zero park", func(s *Server) { s.ClusterPark = 0 }, "cluster-park"},
		{"node id without cluster", func(s *Server) { s.Cluster = false }, "cluster"},
	} {
		s := good()
		tc.edit(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.field)
		}
	}
	cluster := 0
	for _, st := range ServerSettings() {
		if st.Hidden {
			t.Errorf("--%s is hidden", st.Name)
		}
		if strings.HasPrefix(st.Name, "cluster") || st.Name == "node-id" {
			cluster++
		}
	}
	if cluster != 10 {
		t.Errorf("%d cluster settings, want 10", cluster)
	}
}
