package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/names"
)

// checkErrors loads text and compares the error lines with want.
func checkErrors(t *testing.T, name, text string, want ...string) {
	t.Helper()
	cfg, err := ParseEmulatorConfig([]byte(text), Options{})
	if err == nil {
		t.Errorf("%s: loaded without error: %+v", name, cfg)
		return
	}
	if cfg != nil {
		t.Errorf("%s: config returned with an error", name)
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Errorf("%s: error %T is not an ErrorList", name, err)
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("%s:\n got: %s\nwant: %s", name, strings.ReplaceAll(got, "\n", "\n      "),
			strings.Join(want, "\n      "))
	}
}

const (
	q0  = "config: UserConfig.Namespaces[0].Queues[0]"
	qp0 = q0 + ".Properties"
	t0  = "config: UserConfig.Namespaces[0].Topics[0]"
	s0  = t0 + ".Subscriptions[0]"
	sp0 = s0 + ".Properties"
	r0  = s0 + ".Rules[0]"
	rp0 = r0 + ".Properties"
)

func queueWith(props string) string { return wrap(`{"Name": "q", "Properties": {`+props+`}}`, ``) }

func topicWith(props string) string {
	return wrap(``, `{"Name": "t", "Properties": {`+props+`}, "Subscriptions": [{"Name": "s"}]}`)
}

func subWith(props string) string {
	return wrap(`{"Name": "q"}`, `{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {`+props+`}}]}`)
}

func ruleWith(props string) string {
	return wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r", "Properties": {`+props+`}}]}]}`)
}

func TestPropertyRanges(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"lock too long", queueWith(`"LockDuration": "PT10M"`), qp0 + `.LockDuration: "PT10M" is out of range (5 s … 5 min)`},
		{"lock too short", queueWith(`"LockDuration": "PT4.999S"`), qp0 + `.LockDuration: "PT4.999S" is out of range (5 s … 5 min)`},
		{"sub lock", subWith(`"LockDuration": "PT0S"`), sp0 + `.LockDuration: "PT0S" is out of range (5 s … 5 min)`},
		{"ttl", queueWith(`"DefaultMessageTimeToLive": "PT0.5S"`), qp0 + `.DefaultMessageTimeToLive: "PT0.5S" is out of range (≥ 1 s)`},
		{"topic ttl", topicWith(`"DefaultMessageTimeToLive": "PT0S"`), t0 + `.Properties.DefaultMessageTimeToLive: "PT0S" is out of range (≥ 1 s)`},
		{"sub ttl", subWith(`"DefaultMessageTimeToLive": "-PT1H"`), sp0 + `.DefaultMessageTimeToLive: "-PT1H" is out of range (≥ 1 s)`},
		{"dup window short", queueWith(`"DuplicateDetectionHistoryTimeWindow": "PT19S"`), qp0 + `.DuplicateDetectionHistoryTimeWindow: "PT19S" is out of range (20 s … 7 days)`},
		{"dup window long", topicWith(`"DuplicateDetectionHistoryTimeWindow": "P7DT1S"`), t0 + `.Properties.DuplicateDetectionHistoryTimeWindow: "P7DT1S" is out of range (20 s … 7 days)`},
		{"max delivery 0", queueWith(`"MaxDeliveryCount": 0`), qp0 + `.MaxDeliveryCount: 0 is out of range (≥ 1)`},
		{"sub max delivery", subWith(`"MaxDeliveryCount": -3`), sp0 + `.MaxDeliveryCount: -3 is out of range (≥ 1)`},
		{"max delivery int32", queueWith(`"MaxDeliveryCount": 2147483648`), qp0 + `.MaxDeliveryCount: 2147483648 is out of range`},
		{"auto delete", queueWith(`"AutoDeleteOnIdle": "PT4M59S"`), qp0 + `.AutoDeleteOnIdle: "PT4M59S" is out of range (≥ 5 min)`},
		{"topic auto delete", topicWith(`"AutoDeleteOnIdle": "PT1M"`), t0 + `.Properties.AutoDeleteOnIdle: "PT1M" is out of range (≥ 5 min)`},
		{"sub auto delete", subWith(`"AutoDeleteOnIdle": "PT1S"`), sp0 + `.AutoDeleteOnIdle: "PT1S" is out of range (≥ 5 min)`},
		{"max size", queueWith(`"MaxSizeInMegabytes": 0`), qp0 + `.MaxSizeInMegabytes: 0 is out of range (≥ 1)`},
		{"topic max size", topicWith(`"MaxSizeInMegabytes": -1`), t0 + `.Properties.MaxSizeInMegabytes: -1 is out of range (≥ 1)`},
		{"max msg size 0", queueWith(`"MaxMessageSizeInKilobytes": 0`), qp0 + `.MaxMessageSizeInKilobytes: 0 is out of range (1 … 102400)`},
		{"max msg size big", topicWith(`"MaxMessageSizeInKilobytes": 102401`), t0 + `.Properties.MaxMessageSizeInKilobytes: 102401 is out of range (1 … 102400)`},
		{"status", queueWith(`"Status": "Creating"`), qp0 + `.Status: "Creating" is not a status (Active, Disabled, SendDisabled, ReceiveDisabled)`},
		{"user metadata", queueWith(`"UserMetadata": "` + strings.Repeat("é", 1025) + `"`), qp0 + `.UserMetadata: is too long (1025 characters, at most 1024)`},
	} {
		checkErrors(t, tc.name, tc.text, tc.want)
	}
	// The bounds themselves are valid, and beyond the emulator's quotas.
	for _, text := range []string{
		queueWith(`"LockDuration": "PT5S", "DefaultMessageTimeToLive": "PT1S", "DuplicateDetectionHistoryTimeWindow": "PT20S", "MaxDeliveryCount": 1, "AutoDeleteOnIdle": "PT5M", "MaxSizeInMegabytes": 1, "MaxMessageSizeInKilobytes": 1`),
		queueWith(`"LockDuration": "PT5M", "DefaultMessageTimeToLive": "P3650D", "DuplicateDetectionHistoryTimeWindow": "P7D", "MaxDeliveryCount": 2147483647, "MaxSizeInMegabytes": 81920, "MaxMessageSizeInKilobytes": 102400`),
		queueWith(`"UserMetadata": "` + strings.Repeat("é", 1024) + `"`),
	} {
		load(t, text)
	}
}

func TestTypeErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"duration syntax", queueWith(`"LockDuration": "1 minute"`), qp0 + `.LockDuration: "1 minute" is not an ISO 8601 duration (e.g. PT30S, PT5M, P7D)`},
		{"duration number", queueWith(`"LockDuration": 60`), qp0 + `.LockDuration: must be a string, not a number`},
		{"bool", queueWith(`"RequiresSession": "true"`), qp0 + `.RequiresSession: must be true or false, not a string`},
		{"int string", queueWith(`"MaxDeliveryCount": "3"`), qp0 + `.MaxDeliveryCount: must be an integer, not a string`},
		{"int fraction", queueWith(`"MaxDeliveryCount": 3.5`), qp0 + `.MaxDeliveryCount: must be an integer, not 3.5`},
		{"int huge", queueWith(`"MaxSizeInMegabytes": 1e300`), qp0 + `.MaxSizeInMegabytes: 1e300 is out of range`},
		{"properties array", wrap(`{"Name": "q", "Properties": []}`, ``), qp0 + `: must be an object, not an array`},
		{"queues object", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": {}}]}}`, `config: UserConfig.Namespaces[0].Queues: must be an array, not an object`},
		{"queue not object", wrap(`"q"`, ``), q0 + `: must be an object, not a string`},
		{"name number", wrap(`{"Name": 5}`, ``), q0 + `.Name: must be a string, not a number`},
		{"forward bool", queueWith(`"ForwardTo": true`), qp0 + `.ForwardTo: must be a string, not a boolean`},
		{"duplicate key", queueWith(`"LockDuration": "PT1M", "lockduration": "PT2M"`), qp0 + `.LockDuration: duplicate key "lockduration"`},
		{"no UserConfig", `{}`, `config: UserConfig: is required`},
		{"no Namespaces", `{"UserConfig": {}}`, `config: UserConfig.Namespaces: is required`},
		{"empty Namespaces", `{"UserConfig": {"Namespaces": []}}`, `config: UserConfig.Namespaces: at least one namespace is required`},
		{"logging type", `{"UserConfig": {"Namespaces": [{"Name": "ns"}], "Logging": {"Type": 1}}}`, `config: UserConfig.Logging.Type: must be a string, not a number`},
	} {
		checkErrors(t, tc.name, tc.text, tc.want)
	}
	// 3.0 and 3e0 are integers.
	cfg := load(t, queueWith(`"MaxDeliveryCount": 3.0, "MaxSizeInMegabytes": 1e3`))
	if p := cfg.Namespaces[0].Queues[0].Props; *p.MaxDeliveryCount != 3 || *p.MaxSizeInMegabytes != 1000 {
		t.Errorf("got %d, %d", *p.MaxDeliveryCount, *p.MaxSizeInMegabytes)
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 261)
	for _, tc := range []struct{ name, text, want string }{
		{"queue missing", wrap(`{"Properties": {}}`, ``), q0 + `.Name: is required`},
		{"queue empty", wrap(`{"Name": ""}`, ``), q0 + `.Name: is required`},
		{"queue space", wrap(`{"Name": "my queue"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "my queue", "it contains ' ', which Service Bus does not allow in names")},
		{"queue leading slash", wrap(`{"Name": "/q"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "/q", "it must start and end with a letter or digit")},
		{"queue trailing dot", wrap(`{"Name": "q."}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "q.", "it must start and end with a letter or digit")},
		{"queue empty segment", wrap(`{"Name": "a//b"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "a//b", "it has an empty path segment")},
		{"queue dot-dot segment", wrap(`{"Name": "a/../b"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "a/../b", `it has the path segment ".."`)},
		{"queue dot-dot", wrap(`{"Name": ".."}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "..", "it must start and end with a letter or digit")},
		{"queue reserved segment", wrap(`{"Name": "a/subscriptions/b"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "a/subscriptions/b", `it has the path segment "subscriptions", which is reserved for subscription paths`)},
		{"queue too long", wrap(`{"Name": "`+long+`"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, long, "it is 261 characters long; at most 260 are allowed")},
		{"queue unicode", wrap(`{"Name": "qé"}`, ``), q0 + `.Name: ` + nameErr(names.Entity, "qé", "it contains 'é', which Service Bus does not allow in names")},
		{"topic missing", wrap(``, `{"Subscriptions": []}`), t0 + `.Name: is required`},
		{"sub slash", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "a/b"}]}`), s0 + `.Name: ` + nameErr(names.Subscription, "a/b", "it contains '/', which Service Bus does not allow in names")},
		{"sub too long", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "`+strings.Repeat("s", 51)+`"}]}`), s0 + `.Name: ` + nameErr(names.Subscription, strings.Repeat("s", 51), "it is 51 characters long; at most 50 are allowed")},
		{"rule missing", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]}`),
			r0 + `.Name: is required`},
		{"rule dollar", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "$Other", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]}`),
			r0 + `.Name: ` + nameErr(names.Rule, "$Other", "it contains '$', which Service Bus does not allow in names")},
		{"namespace", `{"UserConfig": {"Namespaces": [{"Name": "-ns"}]}}`, `config: UserConfig.Namespaces[0].Name: "-ns" is not a valid name: use only letters, digits, '.', '-' and '_', and start and end with a letter or digit`},
	} {
		checkErrors(t, tc.name, tc.text, tc.want)
	}
	load(t, wrap(`{"Name": "a"}, {"Name": "a.b-c_d/e/F9"}, {"Name": "`+long[1:]+`"}`, ``))
}

func TestUniqueNames(t *testing.T) {
	checkErrors(t, "queue vs queue", wrap(`{"Name": "Orders"}, {"Name": "orders"}`, ``),
		`config: UserConfig.Namespaces[0].Queues[1].Name: "orders" is already used by UserConfig.Namespaces[0].Queues[0].Name (names are case-insensitive)`)
	checkErrors(t, "topic vs queue", wrap(`{"Name": "x"}`, `{"Name": "X"}`),
		t0+`.Name: "X" is already used by UserConfig.Namespaces[0].Queues[0].Name (names are case-insensitive)`)
	checkErrors(t, "subscriptions", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s"}, {"Name": "S"}]}`),
		t0+`.Subscriptions[1].Name: "S" is already used by UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Name (names are case-insensitive)`)
	checkErrors(t, "rules", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
		{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}},
		{"Name": "R", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]}`),
		s0+`.Rules[1].Name: "R" is already used by UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Name (names are case-insensitive)`)
	checkErrors(t, "namespaces", `{"UserConfig": {"Namespaces": [{"Name": "ns"}, {"Name": "NS"}]}}`,
		`config: UserConfig.Namespaces[1].Name: "NS" is already used by UserConfig.Namespaces[0].Name (names are case-insensitive)`)
	// The same names in different scopes are fine.
	load(t, wrap(`{"Name": "s"}`, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
		{"Name": "s", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]},
		{"Name": "t2", "Subscriptions": [{"Name": "s"}]}`))
}

func TestRuleValidation(t *testing.T) {
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"no properties", wrap(``, `{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [{"Name": "r"}]}]}`),
			[]string{rp0 + `: is required`}},
		{"no filter type", ruleWith(`"SqlFilter": {"SqlExpression": "1=1"}`),
			[]string{rp0 + `.FilterType: is required ("Correlation" or "Sql")`}},
		{"bad filter type", ruleWith(`"FilterType": "SqlFilter", "SqlFilter": {"SqlExpression": "1=1"}`),
			[]string{rp0 + `.FilterType: "SqlFilter" is not a filter type (want "Correlation" or "Sql")`}},
		{"sql without SqlFilter", ruleWith(`"FilterType": "Sql"`),
			[]string{rp0 + `.SqlFilter: is required when FilterType is "Sql"`}},
		{"correlation without CorrelationFilter", ruleWith(`"FilterType": "Correlation"`),
			[]string{rp0 + `.CorrelationFilter: is required when FilterType is "Correlation"`}},
		{"sql with correlation", ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "CorrelationFilter": {"To": "x"}`),
			[]string{rp0 + `.CorrelationFilter: is not allowed when FilterType is "Sql"`}},
		{"correlation with sql", ruleWith(`"FilterType": "Correlation", "SqlFilter": {"SqlExpression": "1=1"}, "CorrelationFilter": {"To": "x"}`),
			[]string{rp0 + `.SqlFilter: is not allowed when FilterType is "Correlation"`}},
		{"empty correlation", ruleWith(`"FilterType": "Correlation", "CorrelationFilter": {}`),
			[]string{rp0 + `.CorrelationFilter: needs at least one of ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To or Properties`}},
		{"empty correlation properties", ruleWith(`"FilterType": "Correlation", "CorrelationFilter": {"Properties": {}}`),
			[]string{rp0 + `.CorrelationFilter: needs at least one of ContentType, CorrelationId, Label, MessageId, ReplyTo, ReplyToSessionId, SessionId, To or Properties`}},
		{"SqlFilter without expression", ruleWith(`"FilterType": "Sql", "SqlFilter": {}`),
			[]string{rp0 + `.SqlFilter.SqlExpression: is required`}},
		{"empty expression", ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "  "}`),
			[]string{rp0 + `.SqlFilter.SqlExpression: must not be empty`}},
		{"action without expression", ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {}`),
			[]string{rp0 + `.Action.SqlExpression: is required`}},
		{"filter too long", ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "` + long + `"}`),
			[]string{rp0 + `.SqlFilter.SqlExpression: is too long (1025 characters, at most 1024)`}},
		{"action too long", ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": "` + long + `"}`),
			[]string{rp0 + `.Action.SqlExpression: is too long (1025 characters, at most 1024)`}},
		{"property types", ruleWith(`"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"a": null, "b": [], "c": {}, "d": 1e999, "": "x"}}`),
			[]string{
				rp0 + `.CorrelationFilter.Properties.a: must be a string, number or boolean, not null`,
				rp0 + `.CorrelationFilter.Properties.b: must be a string, number or boolean, not an array`,
				rp0 + `.CorrelationFilter.Properties.c: must be a string, number or boolean, not an object`,
				rp0 + `.CorrelationFilter.Properties.d: 1e999 is out of range`,
				rp0 + `.CorrelationFilter.Properties[""]: a property name must not be empty`,
			}},
		{"property duplicate", ruleWith(`"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"a": 1, "a": 2}}`),
			[]string{rp0 + `.CorrelationFilter.Properties.a: duplicate key "a"`}},
		{"subject and label", ruleWith(`"FilterType": "Correlation", "CorrelationFilter": {"Label": "a", "Subject": "b"}`),
			[]string{rp0 + `.CorrelationFilter.Subject: Subject and Label are the same field; give one`}},
	} {
		checkErrors(t, tc.name, tc.text, tc.want...)
	}
	// The filter text limit is exactly 1024.
	load(t, ruleWith(`"FilterType": "Sql", "SqlFilter": {"SqlExpression": "`+long[1:]+`"}, "Action": {"SqlExpression": "`+long[1:]+`"}`))
}

func TestForwardValidation(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"undeclared", queueWith(`"ForwardTo": "nowhere"`), qp0 + `.ForwardTo: "nowhere" is not a queue or topic of namespace "sbemulatorns"`},
		{"undeclared dlq", subWith(`"ForwardDeadLetteredMessagesTo": "nowhere"`), sp0 + `.ForwardDeadLetteredMessagesTo: "nowhere" is not a queue or topic of namespace "sbemulatorns"`},
		{"self", queueWith(`"ForwardTo": "Q"`), qp0 + `.ForwardTo: "Q" is the entity itself; an entity cannot forward to itself`},
		{"self dlq", queueWith(`"ForwardDeadLetteredMessagesTo": "q"`), qp0 + `.ForwardDeadLetteredMessagesTo: "q" is the entity itself; an entity cannot forward to itself`},
		{"bad name", queueWith(`"ForwardTo": "a b"`), qp0 + `.ForwardTo: ` + nameErr(names.Entity, "a b", "it contains ' ', which Service Bus does not allow in names")},
		{"uri without entity", queueWith(`"ForwardTo": "sb://host/"`), qp0 + `.ForwardTo: "sb://host/" names no entity`},
	} {
		checkErrors(t, tc.name, tc.text, tc.want)
	}
	// Declared queues and topics, in any case, and URIs naming them.
	load(t, wrap(`{"Name": "q", "Properties": {"ForwardTo": "T", "ForwardDeadLetteredMessagesTo": "sb://localhost/Other"}}, {"Name": "other"}`,
		`{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": "q", "ForwardDeadLetteredMessagesTo": "t"}}]}`))
}

func TestMultipleErrors(t *testing.T) {
	text := `{
  "UserConfig": {
    "Namespaces": [{
      "Name": "sbemulatorns",
      "Queues": [
        {"Name": "a", "Properties": {"LockDuration": "PT10M", "MaxDeliveryCount": 0}},
        {"Name": "b", "Properties": {"RequiresSession": "yes"}},
        {"Name": "bad name", "Properties": {"ForwardTo": "ghost"}}
      ],
      "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
        {"Name": "r", "Properties": {"FilterType": "Sql"}}
      ]}]}]
    }]
  }
}`
	checkErrors(t, "many", text,
		`config: UserConfig.Namespaces[0].Queues[1].Properties.RequiresSession: must be true or false, not a string`,
		`config: UserConfig.Namespaces[0].Queues[2].Name: `+nameErr(names.Entity, "bad name", "it contains ' ', which Service Bus does not allow in names"),
		`config: UserConfig.Namespaces[0].Queues[0].Properties.LockDuration: "PT10M" is out of range (5 s … 5 min)`,
		`config: UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount: 0 is out of range (≥ 1)`,
		`config: UserConfig.Namespaces[0].Queues[2].Properties.ForwardTo: "ghost" is not a queue or topic of namespace "sbemulatorns"`,
		rp0+`.SqlFilter: is required when FilterType is "Sql"`,
	)
}

func TestValidateInCode(t *testing.T) {
	c := &EmulatorConfig{Namespaces: []Namespace{{Name: "ns", Topics: []Topic{{
		Name: "t",
		Subscriptions: []Subscription{{Name: "s", Rules: []Rule{{
			Name: "r",
			Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
				Properties: map[string]any{"ok": 1, "bad": []int{1}},
			}},
		}}}},
	}}}}}
	err := c.Validate(Options{})
	want := `config: UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.CorrelationFilter.Properties.bad: [1] ([]int) is not a string, number or boolean`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	c.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Filter.Correlation.Properties = map[string]any{"ok": 1}
	if err := c.Validate(Options{}); err != nil {
		t.Error(err)
	}
	c.Logging = &Logging{Type: "nope"}
	if err := c.Validate(Options{}); err != nil {
		t.Errorf("an unknown logging type is only a warning: %v", err)
	}
	if err := c.Validate(Options{Strict: true}); err == nil {
		t.Error("strict: unknown logging type accepted")
	}
}

func TestWarningsJoinErrors(t *testing.T) {
	checkErrors(t, "misspelt Name", wrap(`{"Nmae": "q"}`, ``),
		q0+`.Name: is required`,
		q0+`.Nmae: unknown key (did you mean "Name"?)`)
}

// nameErr is the text of a names.Error.
func nameErr(k names.Kind, name, problem string) string {
	return (&names.Error{Kind: k, Name: name, Problem: problem}).Error()
}

// TestExistingNames: with Options.ExistingNames, names only entities from
// before the naming rule can have pass (an export of such a broker checks
// itself this way); without it they are errors that name the entity.
func TestExistingNames(t *testing.T) {
	file := `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "a/../b"}, {"Name": "-lead"}],
		"Topics": [{"Name": "t", "Subscriptions": [{"Name": "my sub", "Rules": [{"Name": "r 1", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]}]}]}}`
	if _, err := ParseEmulatorConfig([]byte(file), Options{ExistingNames: true}); err != nil {
		t.Fatalf("with ExistingNames: %v", err)
	}
	_, err := ParseEmulatorConfig([]byte(file), Options{})
	for _, want := range []string{
		`UserConfig.Namespaces[0].Queues[0].Name: The queue or topic name "a/../b" is not valid`,
		`UserConfig.Namespaces[0].Queues[1].Name: The queue or topic name "-lead" is not valid`,
		`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Name: The subscription name "my sub" is not valid`,
		`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Name: The rule name "r 1" is not valid`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
	bad := `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": "a b"}]}]}}`
	if _, err := ParseEmulatorConfig([]byte(bad), Options{ExistingNames: true}); err == nil {
		t.Error("ExistingNames accepted a name no Busbar ever accepted")
	}
}
