package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *time.Duration { return &d }

// emulatorProps are the Properties the emulator's sample gives every
// subscription.
func emulatorSubProps() SubscriptionProps {
	return SubscriptionProps{
		DeadLetteringOnMessageExpiration: ptr(false),
		DefaultMessageTimeToLive:         dur(time.Hour),
		LockDuration:                     dur(time.Minute),
		MaxDeliveryCount:                 ptr(int32(3)),
		RequiresSession:                  ptr(false),
	}
}

func TestLoadEmulatorSample(t *testing.T) {
	cfg, err := LoadEmulatorConfigFile(filepath.Join("testdata", "emulator-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := &EmulatorConfig{
		Namespaces: []Namespace{{
			Name: "sbemulatorns",
			Queues: []Queue{{
				Name: "orders.incoming",
				Props: QueueProps{
					DeadLetteringOnMessageExpiration:    ptr(false),
					DefaultMessageTimeToLive:            dur(time.Hour),
					DuplicateDetectionHistoryTimeWindow: dur(20 * time.Second),
					LockDuration:                        dur(time.Minute),
					MaxDeliveryCount:                    ptr(int32(3)),
					RequiresDuplicateDetection:          ptr(false),
					RequiresSession:                     ptr(false),
					// ForwardTo and ForwardDeadLetteredMessagesTo are "": unset.
				},
			}},
			Topics: []Topic{{
				Name: "billing.events",
				Props: TopicProps{
					DefaultMessageTimeToLive:            dur(time.Hour),
					DuplicateDetectionHistoryTimeWindow: dur(20 * time.Second),
					RequiresDuplicateDetection:          ptr(false),
				},
				Subscriptions: []Subscription{
					{Name: "by-content-type", Props: emulatorSubProps(), Rules: []Rule{{
						Name: "json-only",
						Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
							ContentType: ptr("application/json"),
						}},
					}}},
					{Name: "by-app-property", Props: emulatorSubProps(), Rules: []Rule{{
						Name: "region-eu",
						Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
							Properties: map[string]any{"region": "eu"},
						}},
					}}},
					{Name: "everything", Props: emulatorSubProps()},
					{Name: "by-sql", Props: emulatorSubProps(), Rules: []Rule{{
						Name:   "big-invoices",
						Filter: Filter{Type: FilterSQL, SQL: "sys.Label = 'invoice' AND amount > 1000"},
						Action: "SET sys.To = 'audit'; SET source = 'http://billing.example/api'",
					}}},
				},
			}},
		}},
		Logging: &Logging{Type: "File"},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("loaded:\n%s\nwant:\n%s", mustMarshal(t, cfg), mustMarshal(t, want))
	}
}

func mustMarshal(t *testing.T, c *EmulatorConfig) string {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wrap puts queues and topics JSON into a minimal valid Config.json.
func wrap(queues, topics string) string {
	return `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [` + queues +
		`], "Topics": [` + topics + `]}], "Logging": {"Type": "File"}}}`
}

func load(t *testing.T, text string) *EmulatorConfig {
	t.Helper()
	cfg, err := ParseEmulatorConfig([]byte(text), Options{})
	if err != nil {
		t.Fatalf("unexpected error:\n%v\ninput:\n%s", err, text)
	}
	return cfg
}

func TestQueueAllProperties(t *testing.T) {
	cfg := load(t, wrap(`{"Name": "q/all", "Properties": {
		"LockDuration": "PT5S",
		"MaxSizeInMegabytes": 5120,
		"RequiresDuplicateDetection": true,
		"DuplicateDetectionHistoryTimeWindow": "P7D",
		"RequiresSession": true,
		"DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S",
		"DeadLetteringOnMessageExpiration": true,
		"MaxDeliveryCount": 100,
		"EnableBatchedOperations": false,
		"AutoDeleteOnIdle": "PT5M",
		"Status": "SendDisabled",
		"ForwardTo": "target",
		"ForwardDeadLetteredMessagesTo": "dlq-target",
		"UserMetadata": "owner: team a // not a comment",
		"EnablePartitioning": false,
		"SupportOrdering": true,
		"MaxMessageSizeInKilobytes": 102400
	}}, {"Name": "target"}`, `{"Name": "dlq-target"}`))
	want := QueueProps{
		LockDuration:                        dur(5 * time.Second),
		MaxSizeInMegabytes:                  ptr(int64(5120)),
		RequiresDuplicateDetection:          ptr(true),
		DuplicateDetectionHistoryTimeWindow: dur(7 * day),
		RequiresSession:                     ptr(true),
		DefaultMessageTimeToLive:            dur(MaxDuration),
		DeadLetteringOnMessageExpiration:    ptr(true),
		MaxDeliveryCount:                    ptr(int32(100)),
		EnableBatchedOperations:             ptr(false),
		AutoDeleteOnIdle:                    dur(5 * time.Minute),
		Status:                              ptr(StatusSendDisabled),
		ForwardTo:                           ptr("target"),
		ForwardDeadLetteredMessagesTo:       ptr("dlq-target"),
		UserMetadata:                        ptr("owner: team a // not a comment"),
		EnablePartitioning:                  ptr(false),
		SupportOrdering:                     ptr(true),
		MaxMessageSizeInKilobytes:           ptr(int64(102400)),
	}
	if got := cfg.Namespaces[0].Queues[0].Props; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got := cfg.Namespaces[0].Queues[1].Props; !reflect.DeepEqual(got, QueueProps{}) {
		t.Errorf("queue without Properties: got %+v, want all unset", got)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
}

func TestTopicAndSubscriptionAllProperties(t *testing.T) {
	cfg := load(t, wrap(`{"Name": "fwd"}`, `{"Name": "t", "Properties": {
		"DefaultMessageTimeToLive": "P14D",
		"DuplicateDetectionHistoryTimeWindow": "PT20S",
		"RequiresDuplicateDetection": true,
		"MaxSizeInMegabytes": 1024,
		"AutoDeleteOnIdle": "P1D",
		"Status": "disabled",
		"UserMetadata": "",
		"EnableBatchedOperations": true,
		"EnablePartitioning": true,
		"SupportOrdering": false,
		"MaxMessageSizeInKilobytes": 256
	}, "Subscriptions": [{"Name": "s", "Properties": {
		"LockDuration": "PT5M",
		"RequiresSession": true,
		"DefaultMessageTimeToLive": "PT1S",
		"DeadLetteringOnMessageExpiration": true,
		"DeadLetteringOnFilterEvaluationExceptions": false,
		"MaxDeliveryCount": 1,
		"EnableBatchedOperations": false,
		"AutoDeleteOnIdle": "PT1H",
		"Status": "ReceiveDisabled",
		"ForwardTo": "fwd",
		"ForwardDeadLetteredMessagesTo": "t",
		"UserMetadata": "x"
	}}]}`))
	topic := cfg.Namespaces[0].Topics[0]
	wantTopic := TopicProps{
		DefaultMessageTimeToLive:            dur(14 * day),
		DuplicateDetectionHistoryTimeWindow: dur(20 * time.Second),
		RequiresDuplicateDetection:          ptr(true),
		MaxSizeInMegabytes:                  ptr(int64(1024)),
		AutoDeleteOnIdle:                    dur(day),
		Status:                              ptr(StatusDisabled), // case normalised
		UserMetadata:                        ptr(""),
		EnableBatchedOperations:             ptr(true),
		EnablePartitioning:                  ptr(true),
		SupportOrdering:                     ptr(false),
		MaxMessageSizeInKilobytes:           ptr(int64(256)),
	}
	if !reflect.DeepEqual(topic.Props, wantTopic) {
		t.Errorf("topic: got %+v\nwant %+v", topic.Props, wantTopic)
	}
	wantSub := SubscriptionProps{
		LockDuration:                              dur(5 * time.Minute),
		RequiresSession:                           ptr(true),
		DefaultMessageTimeToLive:                  dur(time.Second),
		DeadLetteringOnMessageExpiration:          ptr(true),
		DeadLetteringOnFilterEvaluationExceptions: ptr(false),
		MaxDeliveryCount:                          ptr(int32(1)),
		EnableBatchedOperations:                   ptr(false),
		AutoDeleteOnIdle:                          dur(time.Hour),
		Status:                                    ptr(StatusReceiveDisabled),
		ForwardTo:                                 ptr("fwd"),
		ForwardDeadLetteredMessagesTo:             ptr("t"),
		UserMetadata:                              ptr("x"),
	}
	if got := topic.Subscriptions[0].Props; !reflect.DeepEqual(got, wantSub) {
		t.Errorf("subscription: got %+v\nwant %+v", got, wantSub)
	}
}

func TestRules(t *testing.T) {
	cfg := load(t, wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
		{"Name": "all-fields", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {
			"ContentType": "ct", "CorrelationId": "cid", "Label": "lbl", "MessageId": "mid",
			"ReplyTo": "rt", "ReplyToSessionId": "rtsid", "SessionId": "sid", "To": "to",
			"Properties": {"s": "v", "i": 2, "f": 2.5, "f2": 2.0, "e": 1e3, "b": true, "big": 99999999999999999999, "Case": "x", "case": "y"}
		}}},
		{"Name": "subject-alias", "Properties": {"FilterType": "correlation", "CorrelationFilter": {"Subject": "s"}}},
		{"Name": "sql", "Properties": {"FilterType": "SQL", "SqlFilter": {"SqlExpression": "1=1"}}},
		{"Name": "sql-action", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a = 'x'"}, "Action": {"SqlExpression": "SET b = 1"}}},
		{"Name": "corr-action", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"To": ""}, "Action": {"SqlExpression": "REMOVE c"}}},
		{"Name": "$Default", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}
	]}]}`))
	got := cfg.Namespaces[0].Topics[0].Subscriptions[0].Rules
	want := []Rule{
		{Name: "all-fields", Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
			ContentType: ptr("ct"), CorrelationID: ptr("cid"), Label: ptr("lbl"), MessageID: ptr("mid"),
			ReplyTo: ptr("rt"), ReplyToSessionID: ptr("rtsid"), SessionID: ptr("sid"), To: ptr("to"),
			Properties: map[string]any{
				"s": "v", "i": int64(2), "f": 2.5, "f2": 2.0, "e": 1000.0, "b": true,
				"big": 99999999999999999999.0, "Case": "x", "case": "y",
			},
		}}},
		{Name: "subject-alias", Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{Label: ptr("s")}}},
		{Name: "sql", Filter: Filter{Type: FilterSQL, SQL: "1=1"}},
		{Name: "sql-action", Filter: Filter{Type: FilterSQL, SQL: "a = 'x'"}, Action: "SET b = 1"},
		{Name: "corr-action", Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{To: ptr("")}}, Action: "REMOVE c"},
		{Name: "$Default", Filter: Filter{Type: FilterSQL, SQL: "1=1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
	// Typed property values: "2" would be a string, 2 is an int64.
	if _, ok := got[0].Filter.Correlation.Properties["f2"].(float64); !ok {
		t.Errorf("2.0 should load as float64")
	}
}

func TestCommentsAndLeniency(t *testing.T) {
	text := "\xef\xbb\xbf" + `// leading comment
/* block
   comment with "quotes" and // slashes */
{
  "UserConfig": { // trailing comment after a brace
    "Namespaces": [
      {
        "Name": "sbemulatorns", /* inline */
        "Queues": [
          { "Name": "q1", "Properties": { "UserMetadata": "http://example.com/a//b /* not a comment */ \"// still a string\"" } },
        ],
        "Topics": [],
      }
    ],
    "Logging": { "Type": "Console" } // no trailing newline at the end
  }
}
// final comment without newline`
	cfg := load(t, text)
	want := `http://example.com/a//b /* not a comment */ "// still a string"`
	if got := *cfg.Namespaces[0].Queues[0].Props.UserMetadata; got != want {
		t.Errorf("UserMetadata = %q, want %q", got, want)
	}
}

func TestCaseInsensitiveKeys(t *testing.T) {
	cfg := load(t, `{"userconfig": {"NAMESPACES": [{"name": "ns", "queues": [{"NAME": "q",
		"properties": {"lockDuration": "PT30S", "maxdeliverycount": 7}}]}], "logging": {"type": "file"}}}`)
	q := cfg.Namespaces[0].Queues[0]
	if q.Name != "q" || *q.Props.LockDuration != 30*time.Second || *q.Props.MaxDeliveryCount != 7 {
		t.Errorf("got %+v", q)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
}

func TestMinimalConfigs(t *testing.T) {
	// Shapes seen in the wild that the emulator accepts.
	for _, text := range []string{
		`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q"}]}], "Logging": {"Type": "File"}}}`,
		`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s"}]}]}]}}`,
		`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns"}]}}`,
		`{"UserConfig": {"Namespaces": [{"Name": "other-ns", "Topics": [{"Name": "t"}]}]}}`,
		`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": null, "Topics": null}], "Logging": null}}`,
	} {
		load(t, text)
	}
}

func TestUnknownKeysWarn(t *testing.T) {
	text := `{"$schema": "x", "UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
		"Properties": {"MaxAllowedConnections": 100},
		"Queues": [{"Name": "q", "DeadletteringOnMessageExpiration": false,
			"Properties": {"LockDurration": "PT1M", "Colour": "red"}}]}],
		"Logging": {"Type": "Syslog"}}}`
	cfg, err := ParseEmulatorConfig([]byte(text), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`config: $schema: unknown key`,
		`config: UserConfig.Namespaces[0].Properties: unknown key`,
		`config: UserConfig.Namespaces[0].Queues[0].DeadletteringOnMessageExpiration: unknown key; DeadLetteringOnMessageExpiration belongs inside "Properties"`,
		`config: UserConfig.Namespaces[0].Queues[0].Properties.LockDurration: unknown key (did you mean "LockDuration"?)`,
		`config: UserConfig.Namespaces[0].Queues[0].Properties.Colour: unknown key`,
		`config: UserConfig.Logging.Type: "Syslog" is not a logging type the emulator knows (File, Console, File,Console); Busbar ignores it`,
	}
	var got []string
	for _, w := range cfg.Warnings {
		got = append(got, w.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Strict: the same problems are errors.
	_, err = ParseEmulatorConfig([]byte(text), Options{Strict: true})
	var list ErrorList
	if !errors.As(err, &list) || len(list) != len(want) {
		t.Fatalf("strict: got %v, want %d errors", err, len(want))
	}
	for i := range want {
		if list[i].Error() != want[i] {
			t.Errorf("strict error %d = %q, want %q", i, list[i].Error(), want[i])
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"UserConfig": }`, "config: line 1, column 16: invalid character '}' looking for beginning of value"},
		{"{\n  \"UserConfig\": {\n    \"Namespaces\": [\n", "config: line 4, column 1: unexpected end of input"},
		{`{"UserConfig": {}} {}`, "config: line 1, column 20: unexpected data after the top-level value"},
		{"{\n /* open", "config: line 2, column 2: unterminated /* comment"},
		{``, "config: line 1, column 1: unexpected end of input"},
		{`[1, 2]`, "config: must be an object, not an array"},
		{strings.Repeat("[", 100), "config: nesting deeper than 64 levels"},
	} {
		_, err := ParseEmulatorConfig([]byte(tc.in), Options{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseEmulatorConfig(%q):\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := LoadEmulatorConfigFile(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	_, err := LoadEmulatorConfig(strings.NewReader(`{"UserConfig": {"Namespaces": []}}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "UserConfig.Namespaces" {
		t.Errorf("got %v", err)
	}
}

func TestForwardTargets(t *testing.T) {
	cfg := load(t, wrap(`{"Name": "a", "Properties": {"ForwardTo": "b", "ForwardDeadLetteredMessagesTo": "sb://host.example/t"}},
		{"Name": "b"}`, `{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": "a", "ForwardDeadLetteredMessagesTo": ""}}]}`))
	want := []ForwardRef{
		{"sbemulatorns", "UserConfig.Namespaces[0].Queues[0].Properties.ForwardTo", "a", "b", "b", false},
		{"sbemulatorns", "UserConfig.Namespaces[0].Queues[0].Properties.ForwardDeadLetteredMessagesTo", "a", "sb://host.example/t", "t", true},
		{"sbemulatorns", "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Properties.ForwardTo", "t/Subscriptions/s", "a", "a", false},
	}
	if got := cfg.ForwardTargets(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	// Undeclared targets: an error, unless EntityExists knows them.
	text := wrap(`{"Name": "a", "Properties": {"ForwardTo": "elsewhere"}}`, ``)
	if _, err := ParseEmulatorConfig([]byte(text), Options{}); err == nil {
		t.Error("undeclared target accepted")
	}
	var asked []string
	_, err := ParseEmulatorConfig([]byte(text), Options{EntityExists: func(ns, name string) bool {
		asked = append(asked, ns+"/"+name)
		return name == "elsewhere"
	}})
	if err != nil || !reflect.DeepEqual(asked, []string{"sbemulatorns/elsewhere"}) {
		t.Errorf("EntityExists: err %v, asked %v", err, asked)
	}
}

func TestForwardEntityName(t *testing.T) {
	for in, want := range map[string]string{
		"orders":                        "orders",
		"a/b":                           "a/b",
		"sb://ns.example/orders":        "orders",
		"sb://ns.example/a/b/":          "a/b",
		"https://ns.example:443/orders": "orders",
		"sb://ns.example/":              "",
		"sb://ns.example/q?x=1":         "sb://ns.example/q?x=1",
		"://bad":                        "://bad",
	} {
		if got := ForwardEntityName(in); got != want {
			t.Errorf("ForwardEntityName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamespaceHostsAndPolicies(t *testing.T) {
	cfg, err := ParseEmulatorConfig([]byte(`{"UserConfig": {"Namespaces": [
		{"Name": "a"},
		{"Name": "b", "Hosts": ["b.example", "bus-b"], "Policies": "Root=k1;Sender=k2:Send"}]}}`), Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Namespaces[1]
	if strings.Join(b.Hosts, ",") != "b.example,bus-b" || b.Policies == nil || *b.Policies != "Root=k1;Sender=k2:Send" {
		t.Fatalf("namespace b: hosts %q, policies %v", b.Hosts, b.Policies)
	}
	if cfg.Namespaces[0].Hosts != nil || cfg.Namespaces[0].Policies != nil {
		t.Fatalf("namespace a: %+v", cfg.Namespaces[0])
	}
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"Hosts": [`) || !strings.Contains(string(out), `"Policies": "Root=k1;Sender=k2:Send"`) {
		t.Errorf("Marshal lost Hosts or Policies:\n%s", out)
	}

	_, err = ParseEmulatorConfig([]byte(`{"UserConfig": {"Namespaces": [
		{"Name": "a", "Hosts": ["x.example", 3, "a b"]},
		{"Name": "b", "Hosts": ["X.example"], "Policies": "=k"},
		{"Name": "c", "Policies": " ; "}]}}`), Options{})
	for _, want := range []string{
		`UserConfig.Namespaces[0].Hosts[1]: must be a string`,
		`UserConfig.Namespaces[0].Hosts[2]: "a b" is not a host name`,
		`UserConfig.Namespaces[1].Hosts[0]: "X.example" is already used by UserConfig.Namespaces[0].Hosts[0]`,
		`UserConfig.Namespaces[1].Policies: entry 1`,
		`UserConfig.Namespaces[2].Policies: names no policy`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}
