package servicebus_test

// Rule management over AMQP with raw go-amqp requests on
// topic/Subscriptions/sub/$management, as the JS and .NET rule managers
// send them (the Go SDK has none): add-rule, remove-rule and
// enumerate-rules with the described types of docs/wire/amqp.md §6.3, paging by
// skip/top, errors and rights. Also $cbs put-token for topic and
// subscription audiences.

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/servicebus/servicebustest"
)

// The descriptor codes the SDKs compare with (docs/wire/amqp.md §6.3).
const (
	codeRuleDescription   uint64 = 1335734829060
	codeEmptyRuleAction   uint64 = 1335734829061
	codeSQLRuleAction     uint64 = 1335734829062
	codeSQLFilter         uint64 = 83483426822
	codeTrueFilter        uint64 = 83483426823
	codeFalseFilter       uint64 = 83483426824
	codeCorrelationFilter uint64 = 83483426825
)

// described unpacks a described list as go-amqp decodes it (its internal
// encoding.DescribedType, by value): the ulong descriptor and the fields.
func described(t *testing.T, what string, v any) (uint64, []any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct || !rv.FieldByName("Descriptor").IsValid() || !rv.FieldByName("Value").IsValid() {
		t.Fatalf("%s is %T (%#v), not a described value", what, v, v)
	}
	code, ok := rv.FieldByName("Descriptor").Interface().(uint64)
	if !ok {
		t.Fatalf("%s: descriptor is %T, not ulong", what, rv.FieldByName("Descriptor").Interface())
	}
	val := rv.FieldByName("Value").Interface()
	if val == nil {
		return code, nil
	}
	fields, ok := val.([]any)
	if !ok {
		t.Fatalf("%s: described value is %T, not a list", what, val)
	}
	return code, fields
}

// mgmtCall sends one management request with string keys and returns the
// reply.
func mgmtCall(r *rpc, op string, body map[string]any) *amqp.Message {
	r.w.t.Helper()
	return r.call(uuid.NewString(), map[string]any{"operation": op, "com.microsoft:tracking-id": uuid.NewString()}, body)
}

func errCond(resp *amqp.Message) string {
	switch c := resp.ApplicationProperties["errorCondition"].(type) {
	case string:
		return c
	case amqp.ErrCond:
		return string(c)
	}
	return ""
}

func statusDesc(resp *amqp.Message) string {
	s, _ := resp.ApplicationProperties["statusDescription"].(string)
	return s
}

// wireRule is a decoded enumerate-rules entry.
type wireRule struct {
	name       string
	filterCode uint64
	filter     []any
	actionCode uint64
	action     []any
	createdAt  any
}

// enumerate calls enumerate-rules and decodes the page; nil for 204.
func enumerate(t *testing.T, mg *rpc, body map[string]any) []wireRule {
	t.Helper()
	resp := mgmtCall(mg, "com.microsoft:enumerate-rules", body)
	switch code := status(t, resp); code {
	case 204:
		return nil
	case 200:
	default:
		t.Fatalf("enumerate-rules %v: %d %s", body, code, statusDesc(resp))
	}
	m, ok := resp.Value.(map[string]any)
	if !ok {
		t.Fatalf("enumerate-rules body is %T", resp.Value)
	}
	list, ok := m["rules"].([]any)
	if !ok {
		t.Fatalf("rules is %T, not a list", m["rules"])
	}
	var out []wireRule
	for i, e := range list {
		em, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("rules[%d] is %T, not a map with string keys", i, e)
		}
		code, rd := described(t, "rule-description", em["rule-description"])
		if code != codeRuleDescription || len(rd) < 3 {
			t.Fatalf("rules[%d]: descriptor %d with %d fields; want %d with at least [filter, action, name]", i, code, len(rd), codeRuleDescription)
		}
		var r wireRule
		r.filterCode, r.filter = described(t, "filter", rd[0])
		r.actionCode, r.action = described(t, "action", rd[1])
		if r.name, ok = rd[2].(string); !ok {
			t.Fatalf("rules[%d]: name is %T", i, rd[2])
		}
		if len(rd) > 3 {
			r.createdAt = rd[3]
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		t.Fatalf("enumerate-rules answered 200 with no rules; an empty page is 204")
	}
	return out
}

func names(rs []wireRule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

func TestWireRuleManagement(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Queues: []string{"q"}, Topics: []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/t") // covers the subscriptions and their nodes
	mg := w.newRPC("t/Subscriptions/s/$management", uuid.NewString(), false)
	add := func(name string, rd map[string]any) *amqp.Message {
		t.Helper()
		return mgmtCall(mg, "com.microsoft:add-rule", map[string]any{"rule-name": name, "rule-description": rd})
	}
	mustAdd := func(name string, rd map[string]any) {
		t.Helper()
		if resp := add(name, rd); status(t, resp) != 200 {
			t.Fatalf("add-rule %s: %d %s", name, status(t, resp), statusDesc(resp))
		}
	}

	// As the JS rule manager sends them: unset fields as null.
	mustAdd("sqlrule", map[string]any{"sql-filter": map[string]any{"expression": "color = 'red'"},
		"sql-rule-action": map[string]any{"expression": "SET tagged = TRUE"}})
	mustAdd("corr", map[string]any{"correlation-filter": map[string]any{
		"correlation-id": "c1", "message-id": nil, "to": nil, "reply-to": nil, "label": "lbl", "session-id": nil,
		"reply-to-session-id": nil, "content-type": nil, "properties": map[string]any{"n": int64(2), "kind": "a"}}})
	mustAdd("CorrNoProps", map[string]any{"correlation-filter": map[string]any{"content-type": "ct", "properties": nil}})
	mustAdd("truth", map[string]any{"sql-filter": map[string]any{"expression": "1=1"}, "sql-rule-action": nil})
	mustAdd("never", map[string]any{"sql-filter": map[string]any{"expression": " 1 = 0 "}})

	// Errors.
	resp := add("SQLRULE", map[string]any{"sql-filter": map[string]any{"expression": "1=1"}})
	if code := status(t, resp); code != 409 || errCond(resp) != "com.microsoft:entity-already-exists" ||
		!strings.Contains(statusDesc(resp), "t/Subscriptions/s/Rules/sqlrule' already exists") {
		t.Fatalf("add-rule of an existing name: %d %q %q", code, errCond(resp), statusDesc(resp))
	}
	resp = add("bad", map[string]any{"sql-filter": map[string]any{"expression": "color = = 'x'"}})
	if code := status(t, resp); code != 400 || errCond(resp) != "amqp:not-allowed" ||
		!regexp.MustCompile(`invalid SQL filter of rule 'bad': filter: 1:\d+: `).MatchString(statusDesc(resp)) {
		t.Fatalf("add-rule with invalid SQL: %d %q %q", code, errCond(resp), statusDesc(resp))
	}
	resp = add("badaction", map[string]any{"sql-filter": map[string]any{"expression": "1=1"}, "sql-rule-action": map[string]any{"expression": "SET = 1"}})
	if code := status(t, resp); code != 400 || !regexp.MustCompile(`invalid SQL action of rule 'badaction': filter: 1:\d+: `).MatchString(statusDesc(resp)) {
		t.Fatalf("add-rule with an invalid action: %d %q", code, statusDesc(resp))
	}
	for name, body := range map[string]map[string]any{
		"no rule-name":          {"rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}},
		"no rule-description":   {"rule-name": "x"},
		"no filter":             {"rule-name": "x", "rule-description": map[string]any{"sql-rule-action": map[string]any{"expression": "SET a = 1"}}},
		"empty correlation":     {"rule-name": "x", "rule-description": map[string]any{"correlation-filter": map[string]any{"properties": map[string]any{}}}},
		"description not a map": {"rule-name": "x", "rule-description": "1=1"},
		"bad rule name":         {"rule-name": "a/b", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}},
		"empty expression":      {"rule-name": "x", "rule-description": map[string]any{"sql-filter": map[string]any{}}},
		"both filters": {"rule-name": "x", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"},
			"correlation-filter": map[string]any{"label": "l"}}},
	} {
		resp := mgmtCall(mg, "com.microsoft:add-rule", body)
		if code := status(t, resp); code != 400 || errCond(resp) == "" {
			t.Errorf("add-rule with %s: %d %q %q", name, code, errCond(resp), statusDesc(resp))
		}
	}

	// enumerate-rules: every rule, ordered by name, with its described
	// types.
	all := enumerate(t, mg, map[string]any{"top": int32(1<<31 - 1), "skip": int32(0)})
	if got, want := names(all), []string{"$Default", "corr", "CorrNoProps", "never", "sqlrule", "truth"}; !slices.Equal(got, want) {
		t.Fatalf("enumerate-rules names %v; want %v", got, want)
	}
	byName := map[string]wireRule{}
	for _, r := range all {
		byName[r.name] = r
		if ts, ok := r.createdAt.(time.Time); !ok || time.Since(ts) > time.Minute {
			t.Errorf("%s: created-at %#v", r.name, r.createdAt)
		}
	}
	for _, name := range []string{"$Default", "truth"} {
		if r := byName[name]; r.filterCode != codeTrueFilter || r.actionCode != codeEmptyRuleAction {
			t.Errorf("%s: filter %d action %d; want the true filter and the empty action", name, r.filterCode, r.actionCode)
		}
	}
	if r := byName["never"]; r.filterCode != codeFalseFilter {
		t.Errorf("never: filter %d; want the false filter", r.filterCode)
	}
	if r := byName["sqlrule"]; r.filterCode != codeSQLFilter || len(r.filter) < 1 || r.filter[0] != "color = 'red'" ||
		r.actionCode != codeSQLRuleAction || len(r.action) < 1 || r.action[0] != "SET tagged = TRUE" {
		t.Errorf("sqlrule: filter %d %v action %d %v", r.filterCode, r.filter, r.actionCode, r.action)
	}
	r := byName["corr"]
	if r.filterCode != codeCorrelationFilter || len(r.filter) != 9 || r.actionCode != codeEmptyRuleAction {
		t.Fatalf("corr: filter %d with %d fields, action %d", r.filterCode, len(r.filter), r.actionCode)
	}
	wantFields := []any{"c1", nil, nil, nil, "lbl", nil, nil, nil}
	if !reflect.DeepEqual(r.filter[:8], wantFields) {
		t.Errorf("corr: fields %#v; want %#v", r.filter[:8], wantFields)
	}
	if props, ok := r.filter[8].(map[string]any); !ok || props["n"] != int64(2) || props["kind"] != "a" || len(props) != 2 {
		t.Errorf("corr: properties %#v", r.filter[8])
	}
	// No properties: still a map (JS throws on null), empty.
	r = byName["CorrNoProps"]
	if r.filterCode != codeCorrelationFilter || len(r.filter) != 9 || r.filter[7] != "ct" {
		t.Fatalf("CorrNoProps: filter %d %#v", r.filterCode, r.filter)
	}
	if rv := reflect.ValueOf(r.filter[8]); !rv.IsValid() || rv.Kind() != reflect.Map || rv.IsNil() || rv.Len() != 0 {
		t.Errorf("CorrNoProps: properties %#v; want an empty map", r.filter[8])
	}

	// Paging as the JS rule manager does it: skip = rules seen so far
	// until a page is empty (204).
	var paged []string
	for page := 0; ; page++ {
		rs := enumerate(t, mg, map[string]any{"top": int32(2), "skip": int32(len(paged))})
		if rs == nil {
			break
		}
		if len(rs) > 2 || page > 5 {
			t.Fatalf("page %d has %d rules (top 2)", page, len(rs))
		}
		paged = append(paged, names(rs)...)
	}
	if !slices.Equal(paged, names(all)) {
		t.Fatalf("paged names %v; want %v", paged, names(all))
	}
	if got := names(enumerate(t, mg, map[string]any{"skip": int64(4)})); !slices.Equal(got, []string{"sqlrule", "truth"}) {
		t.Fatalf("skip 4 without top: %v", got)
	}
	if got := names(enumerate(t, mg, nil)); len(got) != 6 {
		t.Fatalf("enumerate-rules without a body: %v", got)
	}
	for _, body := range []map[string]any{{"top": int32(0)}, {"skip": int32(-1)}, {"top": "ten"}} {
		if resp := mgmtCall(mg, "com.microsoft:enumerate-rules", body); status(t, resp) != 400 {
			t.Errorf("enumerate-rules %v: %d %s", body, status(t, resp), statusDesc(resp))
		}
	}

	// remove-rule; an unknown rule is 404 with the cloud's wording.
	for _, name := range []string{"corr", "TRUTH", "$Default", "never", "corrnoprops"} {
		if resp := mgmtCall(mg, "com.microsoft:remove-rule", map[string]any{"rule-name": name}); status(t, resp) != 200 {
			t.Fatalf("remove-rule %s: %d %s", name, status(t, resp), statusDesc(resp))
		}
	}
	resp = mgmtCall(mg, "com.microsoft:remove-rule", map[string]any{"rule-name": "corr"})
	if code := status(t, resp); code != 404 || errCond(resp) != "amqp:not-found" ||
		!strings.HasPrefix(statusDesc(resp), "The messaging entity 'sb://127.0.0.1/t/Subscriptions/s/Rules/corr' could not be found.") ||
		!strings.Contains(statusDesc(resp), "SystemTracker:busbar:Topic:t|s,") {
		t.Fatalf("remove-rule of an unknown rule: %d %q %q", code, errCond(resp), statusDesc(resp))
	}
	if resp := mgmtCall(mg, "com.microsoft:remove-rule", map[string]any{}); status(t, resp) != 400 {
		t.Fatalf("remove-rule without rule-name: %d", status(t, resp))
	}
	if got := names(enumerate(t, mg, map[string]any{"top": int32(100), "skip": int32(0)})); !slices.Equal(got, []string{"sqlrule"}) {
		t.Fatalf("rules after removals: %v", got)
	}

	// The rules route: only sqlrule is left, with its action.
	snd, err := w.session().NewSender(w.ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, color := range []string{"red", "blue"} {
		if err := snd.Send(w.ctx, &amqp.Message{Data: [][]byte{[]byte(color)}, ApplicationProperties: map[string]any{"color": color}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := s.Broker.Peek(w.ctx, "t/Subscriptions/s", 0, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("subscription holds %d messages (%v); want the red one", len(ds), err)
	}
	if p := ds[0].Message.ApplicationProperties; p["color"] != "red" || p["tagged"] != true || p["RuleName"] != "sqlrule" {
		t.Fatalf("routed copy properties %v", p)
	}

	// Rules exist only on subscriptions.
	w.authorize("amqp://" + s.Addr + "/q")
	for _, node := range []string{"q/$management", "t/$management", "t/Subscriptions/s/$DeadLetterQueue/$management"} {
		other := w.newRPC(node, uuid.NewString(), false)
		resp := mgmtCall(other, "com.microsoft:enumerate-rules", map[string]any{"top": int32(10), "skip": int32(0)})
		if code := status(t, resp); code != 403 || errCond(resp) != "amqp:not-allowed" || !strings.Contains(statusDesc(resp), "Rules exist only on subscriptions") {
			t.Errorf("enumerate-rules on %s: %d %q %q", node, code, errCond(resp), statusDesc(resp))
		}
	}

	// The subscription deleted under an attached node: 404 naming it.
	if err := s.Broker.DeleteSubscription("t", "s"); err != nil {
		t.Fatal(err)
	}
	resp = mgmtCall(mg, "com.microsoft:enumerate-rules", map[string]any{"top": int32(10), "skip": int32(0)})
	if code := status(t, resp); code != 404 || !strings.HasPrefix(statusDesc(resp), "The messaging entity 'sb://127.0.0.1/t/Subscriptions/s' could not be found.") {
		t.Fatalf("enumerate-rules on a deleted subscription: %d %q", code, statusDesc(resp))
	}
	resp = mgmtCall(mg, "com.microsoft:add-rule", map[string]any{"rule-name": "x", "rule-description": map[string]any{"sql-filter": map[string]any{"expression": "1=1"}}})
	if code := status(t, resp); code != 404 || errCond(resp) != "amqp:not-found" {
		t.Fatalf("add-rule on a deleted subscription: %d %q", code, statusDesc(resp))
	}
}

// TestWireRuleRights: rule operations need Manage; Listen (enough for the
// node's receive operations) is not.
func TestWireRuleRights(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}},
		Policies: []auth.Policy{
			{Name: "RootManageSharedAccessKey", PrimaryKey: "root", Rights: auth.Manage},
			{Name: "listenonly", PrimaryKey: "l", Rights: auth.Listen | auth.Send},
		}})
	w := dialWire(t, s)
	aud := "amqp://" + s.Addr + "/t/Subscriptions/s/$management"
	cbs := w.cbsLink()
	if code := status(t, putToken(t, cbs, aud, auth.NewToken("listenonly", "l", aud, time.Now().Add(time.Hour)))); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	mg := w.newRPC("t/Subscriptions/s/$management", uuid.NewString(), false)
	rd := map[string]any{"sql-filter": map[string]any{"expression": "a = 1"}}
	for op, body := range map[string]map[string]any{
		"com.microsoft:add-rule":        {"rule-name": "r", "rule-description": rd},
		"com.microsoft:remove-rule":     {"rule-name": "$Default"},
		"com.microsoft:enumerate-rules": {"top": int32(10), "skip": int32(0)},
	} {
		resp := mgmtCall(mg, op, body)
		if code := status(t, resp); code != 401 || errCond(resp) != "amqp:unauthorized-access" || !strings.Contains(statusDesc(resp), "'Manage'") {
			t.Errorf("%s with Listen, Send rights: %d %q %q", op, code, errCond(resp), statusDesc(resp))
		}
	}
	if code := status(t, mgmtCall(mg, "com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(0), "message-count": int32(1)})); code != 204 {
		t.Fatalf("peek with Listen rights: %d", code)
	}
	if code := status(t, putToken(t, cbs, aud, auth.NewToken("RootManageSharedAccessKey", "root", aud, time.Now().Add(time.Hour)))); code != 202 {
		t.Fatalf("put-token: %d", code)
	}
	if resp := mgmtCall(mg, "com.microsoft:add-rule", map[string]any{"rule-name": "r", "rule-description": rd}); status(t, resp) != 200 {
		t.Fatalf("add-rule with Manage rights: %d %s", status(t, resp), statusDesc(resp))
	}
	if rs, err := s.Broker.ListRules("t", "s", 0, 0); err != nil || len(rs) != 2 {
		t.Fatalf("rules %v, %v", rs, err)
	}
}

// TestWireCBSTopics: put-token answers 202 for topic and subscription
// audiences (with sub-queue and $management) and 404 with the cloud's
// text for unknown ones (docs/wire/amqp.md §0.13).
func TestWireCBSTopics(t *testing.T) {
	tp := broker.DefaultTopicProperties()
	tp.MaxMessageSizeInKilobytes = 64
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, TopicProps: map[string]broker.TopicProperties{"t": tp},
		Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	w := dialWire(t, s)
	cbs := w.cbsLink()
	tok := func(aud string) string {
		return auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, aud, time.Now().Add(time.Hour))
	}
	base := "amqp://" + s.Addr + "/"
	for _, p := range []string{"t", "T/$management", "t/Subscriptions/s", "t/subscriptions/S/$management",
		"t/Subscriptions/s/$DeadLetterQueue", "t/Subscriptions/s/$DeadLetterQueue/$management", "t/Subscriptions/s/$Transfer/$DeadLetterQueue"} {
		if resp := putToken(t, cbs, base+p, tok(base+p)); status(t, resp) != 202 {
			t.Errorf("put-token for %s: %d %s", p, status(t, resp), statusDesc(resp))
		}
	}
	for _, p := range []string{"t/Subscriptions/nope", "t/Subscriptions/nope/$management", "nope/Subscriptions/s", "t/$DeadLetterQueue"} {
		resp := putToken(t, cbs, base+p, tok(base+p))
		desc, _ := resp.ApplicationProperties["status-description"].(string)
		if code := status(t, resp); code != 404 || !strings.HasPrefix(desc, "The messaging entity 'sb://127.0.0.1/"+p+"' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.") {
			t.Errorf("put-token for %s: %d %q", p, code, desc)
		}
	}

	// Links: a receiver on the subscription DLQ, a sender to the topic.
	w.authorize(base + "t")
	second := amqp.ReceiverSettleModeSecond
	if _, err := w.session().NewReceiver(w.ctx, "t/Subscriptions/s/$Transfer/$DeadLetterQueue", &amqp.ReceiverOptions{SettlementMode: &second}); err != nil {
		t.Fatalf("receiver on the transfer DLQ of a subscription: %v", err)
	}
	snd, err := w.session().NewSender(w.ctx, "amqps://"+s.Addr+"/T", nil)
	if err != nil {
		t.Fatal(err)
	}
	if snd.MaxMessageSize() != 64*1024 {
		t.Fatalf("topic sender max-message-size %d; want the topic's 64 KiB", snd.MaxMessageSize())
	}
	_, err = w.session().NewSender(w.ctx, "t/Subscriptions/s/$DeadLetterQueue", nil)
	var ae *amqp.Error
	if err == nil || !strings.Contains(err.Error(), "dead-letter") {
		t.Fatalf("sender to a subscription DLQ = %v; want refused", err)
	}
	_, err = w.session().NewSender(w.ctx, "t/Subscriptions/s", nil)
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotAllowed {
		t.Fatalf("sender to a subscription = %v; want not-allowed", err)
	}
}

// TestWireSubscriptionManagement: the queue operations of $management on
// a subscription and on its dead-letter queue: peek, update-disposition by
// lock token, batch-delete; schedule-message is refused (a subscription
// receives through its topic).
func TestWireSubscriptionManagement(t *testing.T) {
	s := servicebustest.Start(t, &servicebustest.Options{Topics: []string{"t"}, Subscriptions: []servicebustest.Subscription{{Topic: "t", Name: "s"}}})
	w := dialWire(t, s)
	w.authorize("amqp://" + s.Addr + "/t")
	snd, err := w.session().NewSender(w.ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a", "b", "c"} {
		if err := snd.Send(w.ctx, amqp.NewMessage([]byte(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	mg := w.newRPC("t/Subscriptions/s/$management", uuid.NewString(), false)
	dlqMg := w.newRPC("t/Subscriptions/s/$DeadLetterQueue/$management", uuid.NewString(), false)
	peekCount := func(r *rpc) int {
		t.Helper()
		resp := mgmtCall(r, "com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(0), "message-count": int32(10)})
		if status(t, resp) == 204 {
			return 0
		}
		list, _ := resp.Value.(map[string]any)["messages"].([]any)
		return len(list)
	}
	if n := peekCount(mg); n != 3 {
		t.Fatalf("peek on the subscription: %d messages", n)
	}

	second := amqp.ReceiverSettleModeSecond
	rcv, err := w.session().NewReceiver(w.ctx, "t/Subscriptions/s", &amqp.ReceiverOptions{SettlementMode: &second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := mgmtCall(mg, "com.microsoft:update-disposition", map[string]any{"disposition-status": "suspended",
		"lock-tokens": []amqp.UUID{rfcFromTag(t, m.DeliveryTag)}, "deadletter-reason": "why", "deadletter-description": "because"})
	if code := status(t, resp); code != 200 {
		t.Fatalf("update-disposition suspended on a subscription: %d %s", code, statusDesc(resp))
	}
	if n := peekCount(dlqMg); n != 1 {
		t.Fatalf("peek on the subscription DLQ: %d messages", n)
	}
	ds, err := s.Broker.Peek(w.ctx, "t/Subscriptions/s/$DeadLetterQueue", 0, 10)
	if err != nil || len(ds) != 1 || ds[0].Message.ApplicationProperties["DeadLetterReason"] != "why" {
		t.Fatalf("dead-lettered: %v %v", ds, err)
	}

	for _, c := range []struct {
		r    *rpc
		want int32
	}{{dlqMg, 1}, {mg, 2}} {
		resp := mgmtCall(c.r, "com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(10), "enqueued-time-utc": time.Now().Add(time.Minute)})
		if code := status(t, resp); code != 200 || resp.Value.(map[string]any)["message-count"] != c.want {
			t.Fatalf("batch-delete: %d %v; want %d deleted", code, resp.Value, c.want)
		}
	}
	resp = mgmtCall(mg, "com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(10)})
	if code := status(t, resp); code != 204 || errCond(resp) != "com.microsoft:message-not-found" {
		t.Fatalf("batch-delete of nothing: %d %q", code, errCond(resp))
	}

	enc, err := amqp.NewMessage([]byte("x")).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	resp = mgmtCall(mg, "com.microsoft:schedule-message", map[string]any{"messages": []any{map[string]any{"message-id": "m", "message": enc}}})
	if code := status(t, resp); code != 403 || errCond(resp) != "amqp:not-allowed" || !strings.Contains(statusDesc(resp), "is a subscription") {
		t.Fatalf("schedule-message on a subscription: %d %q %q", code, errCond(resp), statusDesc(resp))
	}
}
