package admin

// Topics, subscriptions and rules over raw HTTP: what clients other than
// Go send (JS bodies and trailing slashes, .NET and Java path words), the
// exact URLs of ids and links, and the status codes of every failure.

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

const (
	entryHead = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">`
	entryTail = `</content></entry>`
	sbNS      = `xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"`
)

func topicBody(inner string) string {
	return entryHead + `<TopicDescription ` + sbNS + `>` + inner + `</TopicDescription>` + entryTail
}

func subBody(inner string) string {
	return entryHead + `<SubscriptionDescription ` + sbNS + `>` + inner + `</SubscriptionDescription>` + entryTail
}

func ruleBody(inner string) string {
	return entryHead + `<RuleDescription ` + sbNS + ` xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` + inner + `</RuleDescription>` + entryTail
}

// jsRuleBody is what JS 7.9.5's createRule(topic, sub, "js", {sqlExpression,
// sqlParameters}, {sqlExpression}) sends: p4 prefixes, every number a
// double, the action explicit.
const jsRuleBody = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>` +
	`<entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-21T12:00:00.000Z</updated><content type="application/xml">` +
	`<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
	`<Filter xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="SqlFilter"><SqlExpression>n &gt; @n AND s = 'it''s'</SqlExpression>` +
	`<Parameters><KeyValueOfstringanyType><Key>@n</Key><Value xmlns:l28="http://www.w3.org/2001/XMLSchema" xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="l28:double">2</Value></KeyValueOfstringanyType></Parameters></Filter>` +
	`<Action xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="SqlRuleAction"><SqlExpression>SET x = 1</SqlExpression></Action>` +
	`<Name>js</Name></RuleDescription></content></entry>`

func TestHTTPTopicSubscriptionRuleURLs(t *testing.T) {
	e := newEnv(t)
	// Create a topic with a JS-style body and a .NET-style lower-case path
	// word elsewhere.
	status, hdr, body := e.do("PUT", "/news?api-version=2021-05", `<?xml version="1.0" encoding="UTF-8"?>`+topicBody(`<MaxSizeInMegabytes>2048</MaxSizeInMegabytes>`))
	if status != http.StatusCreated || hdr.Get("Content-Type") != contentTypeEntry || !strings.Contains(body, "<MaxSizeInMegabytes>2048</MaxSizeInMegabytes>") {
		t.Fatalf("create topic: %d %s\n%s", status, hdr.Get("Content-Type"), body)
	}
	if !strings.Contains(body, "<id>https://"+e.host+"/news?api-version=2021-05</id>") || !strings.Contains(body, "<author><name>testns</name></author>") {
		t.Errorf("topic entry envelope:\n%s", body)
	}

	// Subscriptions: create on the JS path, ids with capitalised words and
	// no author.
	for _, s := range []string{"b", "a", "c"} {
		status, _, body = e.do("PUT", "/news/subscriptions/"+s+"?api-version=2021-05", subBody(`<LockDuration>PT30S</LockDuration>`))
		if status != http.StatusCreated {
			t.Fatalf("create subscription %s: %d\n%s", s, status, body)
		}
	}
	if !strings.Contains(body, "<id>https://"+e.host+"/news/Subscriptions/c?api-version=2021-05</id><title type=\"text\">c</title>") ||
		strings.Contains(body, "<author>") || !strings.Contains(body, "<LockDuration>PT30S</LockDuration>") {
		t.Errorf("subscription entry:\n%s", body)
	}

	// JS lists with a trailing slash and follows next links.
	f := e.list("/news/Subscriptions/?$top=2&api-version=2021-05")
	if f.Title != "Subscriptions" || !slices.Equal(f.titles(), []string{"a", "b"}) {
		t.Errorf("page 1: %q %v", f.Title, f.titles())
	}
	base := "https://" + e.host + "/news/Subscriptions?"
	if got, want := f.link("self"), base+"$top=2&api-version=2021-05"; got != want {
		t.Errorf("self = %s; want %s", got, want)
	}
	next := f.link("next")
	if want := base + "$skip=2&$top=2&api-version=2021-05"; next != want {
		t.Fatalf("next = %s; want %s", next, want)
	}
	if id := f.Entries[0].ID; id != "https://"+e.host+"/news/Subscriptions/a?api-version=2021-05" {
		t.Errorf("entry id %s", id)
	}
	f = e.list(strings.TrimPrefix(next, "https://"+e.host))
	if !slices.Equal(f.titles(), []string{"c"}) || f.link("next") != "" {
		t.Errorf("page 2: %v, next %q", f.titles(), f.link("next"))
	}
	// Go's doubled "?" and .NET's enrich are ignored.
	f = e.list("/NEWS/SUBSCRIPTIONS?%24top=5&%3F=&enrich=false")
	if !slices.Equal(f.titles(), []string{"a", "b", "c"}) || len(f.Links) != 1 {
		t.Errorf("all: %v, links %+v", f.titles(), f.Links)
	}

	// Rules: JS's body, Java's lower-case path words.
	status, _, body = e.do("PUT", "/news/subscriptions/a/rules/js?api-version=2021-05", jsRuleBody)
	if status != http.StatusCreated {
		t.Fatalf("create rule: %d\n%s", status, body)
	}
	for _, s := range []string{
		"<id>https://" + e.host + "/news/Subscriptions/a/Rules/js?api-version=2021-05</id>",
		`<Filter i:type="SqlFilter"><SqlExpression>n &gt; @n AND s = 'it''s'</SqlExpression><CompatibilityLevel>20</CompatibilityLevel>`,
		`<Value i:type="d6p1:double" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">2</Value>`,
		`<Action i:type="SqlRuleAction"><SqlExpression>SET x = 1</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters/></Action>`,
		`<CreatedAt>2026-11-21T12:00:00Z</CreatedAt><Name>js</Name>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("rule entry lacks %s\n%s", s, body)
		}
	}
	r, err := e.b.GetRule("news", "a", "js")
	if err != nil || r.Filter.Expression != "n > @n AND s = 'it''s'" || r.Filter.Parameters["@n"] != 2.0 || r.Action == nil {
		t.Errorf("broker rule %+v, %v", r, err)
	}
	f = e.list("/news/Subscriptions/a/Rules/?$top=1")
	if f.Title != "Rules" || !slices.Equal(f.titles(), []string{"$Default"}) {
		t.Errorf("rules page: %q %v", f.Title, f.titles())
	}
	if next := f.link("next"); next != "https://"+e.host+"/news/Subscriptions/a/Rules?$skip=1&$top=1" {
		t.Errorf("rules next = %s", next)
	}
	f = e.list("/news/Subscriptions/a/Rules?$skip=1&$top=1")
	if !slices.Equal(f.titles(), []string{"js"}) || f.link("next") != "" {
		t.Errorf("rules page 2: %v, next %q", f.titles(), f.link("next"))
	}
	f = e.list("/news/Subscriptions/a/Rules?$skip=7")
	if len(f.Entries) != 0 || f.link("self") == "" {
		t.Errorf("past the end: %v", f.titles())
	}

	// GET, update with If-Match, DELETE of each kind, any case.
	if status, _, body := e.do("GET", "/news/SUBSCRIPTIONS/A/RULES/JS", ""); status != http.StatusOK || !strings.Contains(body, "<Name>js</Name>") {
		t.Errorf("GET rule: %d\n%s", status, body)
	}
	status, _, body = e.do("PUT", "/news/Subscriptions/a/Rules/js", ruleBody(`<Filter i:type="FalseFilter"/><Name>js</Name>`), "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(body, `<Filter i:type="FalseFilter"><SqlExpression>1=0</SqlExpression>`) || !strings.Contains(body, `<Action i:type="EmptyRuleAction"/>`) {
		t.Errorf("update rule: %d\n%s", status, body)
	}
	status, _, body = e.do("PUT", "/news/Subscriptions/a", subBody(`<MaxDeliveryCount>4</MaxDeliveryCount>`), "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(body, "<MaxDeliveryCount>4</MaxDeliveryCount>") || !strings.Contains(body, "<LockDuration>PT1M</LockDuration>") {
		t.Errorf("update subscription: %d\n%s", status, body)
	}
	status, _, body = e.do("PUT", "/news", topicBody(`<SupportOrdering>false</SupportOrdering>`), "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(body, "<SupportOrdering>false</SupportOrdering>") || !strings.Contains(body, "<MaxSizeInMegabytes>1024</MaxSizeInMegabytes>") {
		t.Errorf("update topic: %d\n%s", status, body)
	}
	for _, p := range []string{"/news/Subscriptions/a/Rules/js", "/news/subscriptions/b", "/news"} {
		status, hdr, body := e.do("DELETE", p, "")
		if status != http.StatusOK || body != "" || hdr.Get("Content-Type") != "" {
			t.Errorf("DELETE %s: %d %q", p, status, body)
		}
		e.fails(404, "DELETE", p, "", "~SubCode=40400")
		e.fails(404, "GET", p, "", "~SubCode=40400")
	}
	if _, err := e.b.GetSubscription("news", "a"); err == nil {
		t.Error("the topic's delete left a subscription")
	}
}

func TestHTTPTopicErrors(t *testing.T) {
	e := newEnv(t)
	e.queue("q")
	e.topic("t")
	e.sub("t", "s", nil)

	_, hdr, _ := e.do("POST", "/t/Subscriptions/s", "")
	if hdr.Get("Allow") != "DELETE, GET, PUT" {
		t.Errorf("Allow = %q", hdr.Get("Allow"))
	}
	e.fails(405, "POST", "/t/Subscriptions/s/Rules/$Default", "", "~POST")
	e.fails(405, "DELETE", "/t/Subscriptions", "", "~GET")
	e.fails(405, "PUT", "/$Resources/Topics", "", "~GET")
	e.fails(405, "DELETE", "/t/Subscriptions/s/Rules", "")

	// Name clashes and wrong kinds.
	e.fails(409, "PUT", "/Q", topicBody(""), "~SubCode=40900", "~already exists")
	e.fails(409, "PUT", "/T", jsCreateBody, "~already exists")
	e.fails(409, "PUT", "/q", topicBody(""), "If-Match", "*", "~is a queue")
	e.fails(409, "PUT", "/t", jsCreateBody, "If-Match", "*", "~is a topic")
	e.fails(409, "PUT", "/t/Subscriptions/S", subBody(""), "~already exists")
	e.fails(409, "PUT", "/t/Subscriptions/s/Rules/$DEFAULT", ruleBody(""), "~already exists")
	e.fails(400, "PUT", "/t/Subscriptions/x", topicBody(""), "~TopicDescription", "~SubscriptionDescription")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", subBody(""), "~RuleDescription")
	e.fails(400, "PUT", "/t", ruleBody(""), "~QueueDescription or a TopicDescription")

	// Missing things are 404 on every method.
	e.fails(404, "GET", "/nope", "", "~'nope'")
	e.fails(404, "GET", "/t/Subscriptions/nope", "")
	e.fails(404, "GET", "/nope/Subscriptions", "")
	e.fails(404, "GET", "/t/Subscriptions/nope/Rules", "")
	e.fails(404, "GET", "/t/Subscriptions/s/Rules/nope", "", "~nope")
	e.fails(404, "PUT", "/nope", topicBody(""), "If-Match", "*")
	e.fails(404, "PUT", "/nope/Subscriptions/s", subBody(""))
	e.fails(404, "PUT", "/t/Subscriptions/nope", subBody(""), "If-Match", "*")
	e.fails(404, "PUT", "/t/Subscriptions/nope/Rules/r", ruleBody(""))
	e.fails(404, "PUT", "/t/Subscriptions/s/Rules/nope", ruleBody(""), "If-Match", "*")
	e.fails(404, "DELETE", "/t/Subscriptions/s/Rules/nope", "")
	e.fails(404, "GET", "/t/$DeadLetterQueue", "") // a topic has no sub-queues
	e.fails(400, "GET", "/q/$DeadLetterQueue", "", "~sub-queue")

	// Bad input is 400 with what is wrong.
	e.fails(400, "PUT", "/t2", topicBody(`<MaxSizeInMegabytes>lots</MaxSizeInMegabytes>`), "~MaxSizeInMegabytes", "~whole number")
	e.fails(400, "PUT", "/t2", topicBody(`<RequiresDuplicateDetection>true</RequiresDuplicateDetection><DuplicateDetectionHistoryTimeWindow>PT1S</DuplicateDetectionHistoryTimeWindow>`), "~DuplicateDetectionHistoryTimeWindow")
	e.fails(400, "PUT", "/t", topicBody(`<EnablePartitioning>true</EnablePartitioning>`), "If-Match", "*", "~EnablePartitioning")
	e.fails(400, "PUT", "/t/Subscriptions/s2", subBody(`<LockDuration>PT1H</LockDuration>`), "~LockDuration")
	e.fails(400, "PUT", "/t/Subscriptions/s", subBody(`<RequiresSession>true</RequiresSession>`), "If-Match", "*", "~RequiresSession")
	e.fails(400, "PUT", "/t/Subscriptions/s2", subBody(`<DefaultRuleDescription><Filter i:type="SqlFilter" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><SqlExpression>a = </SqlExpression></Filter></DefaultRuleDescription>`), "~SQL filter", "~1:")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Filter i:type="SqlFilter"><SqlExpression>color = 'red' AND</SqlExpression></Filter>`), "~invalid SQL filter of rule 'r'", "~1:")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Filter i:type="TrueFilter"/><Action i:type="SqlRuleAction"><SqlExpression>SET = 1</SqlExpression></Action>`), "~invalid SQL action of rule 'r'", "~1:")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Filter i:type="BloomFilter"/>`), "~Filter", "~BloomFilter")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Filter i:type="CorrelationFilter"/>`), "~correlation filter")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Name>other</Name>`), "~Name", "~'other'", "~'r'")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/", ruleBody(`<Filter i:type="TrueFilter"/>`), "~Name")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/bad*name", ruleBody(""), "~rule name")
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r", ruleBody(`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@p</Key><Value i:type="d6p1:int" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">5000000000</Value></KeyValueOfstringanyType></Parameters></Filter>`), "~Filter Parameters", "~@p", "~int")
	for _, q := range []string{"$top=0", "$skip=-1"} {
		e.fails(400, "GET", "/$Resources/Topics?"+q, "")
		e.fails(400, "GET", "/t/Subscriptions?"+q, "")
		e.fails(400, "GET", "/t/Subscriptions/s/Rules?"+q, "")
	}
	if ts := e.b.ListTopics(); len(ts) != 1 {
		t.Errorf("failed requests created topics: %+v", ts)
	}
	if rs, _ := e.b.ListRules("t", "s", 0, 0); len(rs) != 1 {
		t.Errorf("failed requests changed the rules: %+v", rs)
	}
}

// TestHTTPSubscriptionForwardingAuthorization: forwarding from a
// subscription needs Send rights on the target, as for queues (§1.4).
func TestHTTPSubscriptionForwardingAuthorization(t *testing.T) {
	e := newEnvWith(t, auth.Config{Policies: []auth.Policy{
		auth.DefaultPolicy(),
		{Name: "listener", PrimaryKey: "listen-key", Rights: auth.Listen},
	}})
	e.topic("t")
	e.queue("dst")
	forSub := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "https://"+e.host+"/t/Subscriptions/s", time.Now().Add(time.Hour))
	const supp, dlqSupp = "ServiceBusSupplementaryAuthorization", "ServiceBusDlqSupplementaryAuthorization"

	e.fails(401, "PUT", "/t/Subscriptions/s", subBody(`<ForwardTo>dst</ForwardTo>`), "Authorization", forSub, "~"+supp, "~'dst'")
	e.fails(401, "PUT", "/t/Subscriptions/s", subBody(`<ForwardDeadLetteredMessagesTo>dst</ForwardDeadLetteredMessagesTo>`), "Authorization", forSub, "~"+dlqSupp)
	listen := auth.NewToken("listener", "listen-key", "dst", time.Now().Add(time.Hour))
	e.fails(401, "PUT", "/t/Subscriptions/s", subBody(`<ForwardTo>dst</ForwardTo>`), "Authorization", forSub, supp, listen, "~Send")
	if _, err := e.b.GetSubscription("t", "s"); err == nil {
		t.Fatal("an unauthorized PUT created the subscription")
	}
	// The update path checks too.
	e.sub("t", "s", nil)
	e.fails(401, "PUT", "/t/Subscriptions/s", subBody(`<ForwardTo>dst</ForwardTo>`), "Authorization", forSub, "If-Match", "*", "~"+supp)

	sendDst := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "dst", time.Now().Add(time.Hour))
	status, _, b := e.do("PUT", "/t/Subscriptions/s", subBody(`<ForwardTo>sb://`+e.host+`/dst</ForwardTo>`), "Authorization", forSub, supp, sendDst, "If-Match", "*")
	if status != http.StatusOK || !strings.Contains(b, "<ForwardTo>sb://"+e.host+"/dst</ForwardTo>") {
		t.Fatalf("update with supplementary token: %d\n%s", status, b)
	}
	// Without Manage, nothing on topics is allowed.
	listenAll := auth.NewToken("listener", "listen-key", "https://"+e.host, time.Now().Add(time.Hour))
	for _, p := range []string{"/t", "/$Resources/Topics", "/t/Subscriptions", "/t/Subscriptions/s", "/t/Subscriptions/s/Rules", "/t/Subscriptions/s/Rules/$Default"} {
		e.fails(401, "GET", p, "", "Authorization", listenAll, "~Manage")
	}
}

// TestHTTPTopicRuntimeCounts: the raw topic entry carries the counts of
// §1.11 with the broker's values.
func TestHTTPTopicRuntimeCounts(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	e.sub("t", "a", nil)
	e.sub("t", "b", &broker.RuleDescription{Name: "c", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{Label: "x"})})
	_, body := e.get("/t")
	for _, s := range []string{
		"<SizeInBytes>0</SizeInBytes>",
		"<SubscriptionCount>2</SubscriptionCount><SqlFilterCount>1</SqlFilterCount><CorrelationFilterCount>1</CorrelationFilterCount>",
		"<d2p1:ScheduledMessageCount>0</d2p1:ScheduledMessageCount>",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("topic entry lacks %s\n%s", s, body)
		}
	}
}

// get GETs path and fails unless it is a 200 entry.
func (e *env) get(path string) (http.Header, string) {
	e.t.Helper()
	status, hdr, body := e.do("GET", path, "")
	if status != http.StatusOK || hdr.Get("Content-Type") != contentTypeEntry {
		e.t.Fatalf("GET %s: %d %s\n%s", path, status, hdr.Get("Content-Type"), body)
	}
	return hdr, body
}

// TestDataFunctionsTopics: the topic, subscription and rule data
// functions work without HTTP.
func TestDataFunctionsTopics(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"b", "a", "c"} {
		if _, err := e.h.CreateTopic(n, broker.DefaultTopicProperties()); err != nil {
			t.Fatal(err)
		}
	}
	page := e.h.ListTopics(ListOptions{Skip: 1, Top: 1})
	if len(page.Topics) != 1 || page.Topics[0].Name != "b" || !page.More {
		t.Errorf("topics page %+v", page)
	}
	for _, n := range []string{"y", "x", "z"} {
		if _, err := e.h.CreateSubscription("a", n, broker.DefaultSubscriptionProperties(), nil); err != nil {
			t.Fatal(err)
		}
	}
	subs, err := e.h.ListSubscriptions("a", ListOptions{Top: 2})
	if err != nil || len(subs.Subscriptions) != 2 || subs.Subscriptions[1].Name != "y" || !subs.More {
		t.Errorf("subscriptions page %+v, %v", subs, err)
	}
	if _, err := e.h.ListSubscriptions("nope", ListOptions{}); broker.KindOf(err) != broker.KindNotFound {
		t.Errorf("ListSubscriptions(nope): %v", err)
	}
	for _, n := range []string{"r2", "r1"} {
		if _, err := e.h.CreateRule("a", "x", broker.RuleDescription{Name: n, Filter: broker.FalseRuleFilter()}); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := e.h.ListRules("a", "x", ListOptions{Skip: 1, Top: 1})
	if err != nil || len(rules.Rules) != 1 || rules.Rules[0].Name != "r1" || !rules.More {
		t.Errorf("rules page %+v, %v", rules, err)
	}
	rules, err = e.h.ListRules("a", "x", ListOptions{Skip: 2})
	if err != nil || len(rules.Rules) != 1 || rules.Rules[0].Name != "r2" || rules.More {
		t.Errorf("last rules page %+v, %v", rules, err)
	}
	if _, err := e.h.UpdateRule("a", "x", broker.RuleDescription{Name: "r1", Filter: broker.TrueRuleFilter()}); err != nil {
		t.Fatal(err)
	}
	if r, err := e.h.GetRule("a", "x", "r1"); err != nil || r.Filter.Kind != broker.FilterTrue {
		t.Errorf("GetRule = %+v, %v", r, err)
	}
	if err := e.h.DeleteRule("a", "x", "r1"); err != nil {
		t.Fatal(err)
	}
	sub, err := e.h.UpdateSubscription("a", "x", broker.DefaultSubscriptionProperties())
	if err != nil || sub.TopicName != "a" || sub.Name != "x" {
		t.Errorf("UpdateSubscription = %+v, %v", sub, err)
	}
	if sub, err := e.h.GetSubscription("a", "x"); err != nil || sub.Properties.MaxDeliveryCount != 10 {
		t.Errorf("GetSubscription = %+v, %v", sub, err)
	}
	if err := e.h.DeleteSubscription("a", "x"); err != nil {
		t.Fatal(err)
	}
	tp, err := e.h.UpdateTopic("a", broker.DefaultTopicProperties())
	if err != nil || tp.SubscriptionCount != 2 {
		t.Errorf("UpdateTopic = %+v, %v", tp, err)
	}
	if tp, err := e.h.GetTopic("a"); err != nil || tp.SQLFilterCount != 2 {
		t.Errorf("GetTopic = %+v, %v", tp, err)
	}
	if err := e.h.DeleteTopic("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.GetTopic("a"); err == nil {
		t.Error("deleted topic still there")
	}
}

// TestHTTPNameEscaping: names with characters a URL cannot carry as they
// are come back escaped in ids and links and as sent in titles.
// TestHTTPNameRule: the admin API refuses to create a queue, topic,
// subscription or rule whose name breaks the naming rule, with a 400 that
// states the rule (names that need escaping can only come from older data:
// see TestHTTPLegacyNames).
func TestHTTPNameRule(t *testing.T) {
	e := newEnv(t)
	e.topic("t")
	e.fails(400, "PUT", "/a/../b", jsCreateBody, "~SubCode=40000", `~The queue or topic name "a/../b" is not valid: it has the path segment ".."`, "~Queue and topic names are 1 to 260")
	e.fails(400, "PUT", "/a/%2E%2E/b", jsCreateBody, `~The queue or topic name "a/../b" is not valid`)
	e.fails(400, "PUT", "/..", jsCreateBody, `~The queue or topic name ".." is not valid`)
	// A token scoped to "sq" does not get "evil2" either (the probe).
	sq := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "https://"+e.host+"/sq", time.Now().Add(time.Hour))
	e.fails(400, "PUT", "/sq/../evil2", jsCreateBody, "Authorization", sq, `~The queue or topic name "sq/../evil2" is not valid`)
	e.fails(400, "PUT", "/x/./y", topicBody(""), `~The queue or topic name "x/./y" is not valid`)
	e.fails(400, "PUT", "/-lead", topicBody(""), "~must start and end with a letter or digit")
	e.fails(400, "PUT", "/t/Subscriptions/my%20sub", subBody(""), `~The subscription name "my sub" is not valid: it contains ' '`)
	e.fails(400, "PUT", "/t/Subscriptions/s", subBody(`<DefaultRuleDescription><Name>r 1</Name></DefaultRuleDescription>`), `~The rule name "r 1" is not valid`)
	status, _, body := e.do("PUT", "/t/Subscriptions/s", subBody(""))
	if status != http.StatusCreated {
		t.Fatalf("create s: %d\n%s", status, body)
	}
	e.fails(400, "PUT", "/t/Subscriptions/s/Rules/r%201", ruleBody(""), `~The rule name "r 1" is not valid`)
	if got := e.b.ListQueues(); len(got) != 0 {
		t.Errorf("queues created: %v", got)
	}
}
