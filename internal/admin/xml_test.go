package admin

import (
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
)

// decodeQueueBody runs a request body through the same steps as PUT.
func decodeQueueBody(body string) (broker.QueueProperties, error) {
	root, err := parseXML(strings.NewReader(body))
	if err != nil {
		return broker.QueueProperties{}, err
	}
	desc, err := description(root)
	if err != nil {
		return broker.QueueProperties{}, err
	}
	if !desc.is(nsServiceBus, "QueueDescription") {
		return broker.QueueProperties{}, badRequest("not a QueueDescription: %s", desc.name.Local)
	}
	return decodeQueueProperties(desc, t0)
}

// props returns the defaults changed by mods.
func props(mods ...func(*broker.QueueProperties)) broker.QueueProperties {
	p := broker.DefaultQueueProperties()
	for _, m := range mods {
		m(&p)
	}
	return p
}

// lockAndCount is what most leniency cases below set.
func lockAndCount(p *broker.QueueProperties) {
	p.LockDuration = 30 * time.Second
	p.MaxDeliveryCount = 7
}

func TestDecodeQueueLeniency(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want broker.QueueProperties
	}{{
		name: "Go: no xmlns:i, AuthorizationRules empty, Go's element order",
		body: `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<LockDuration>PT30S</LockDuration><MaxDeliveryCount>7</MaxDeliveryCount>` +
			`<AuthorizationRules></AuthorizationRules><Status>Active</Status>` +
			`<AutoDeleteOnIdle>PT1H</AutoDeleteOnIdle><EnablePartitioning>true</EnablePartitioning>` +
			`<UserMetadata>meta</UserMetadata><MaxMessageSizeInKilobytes>512</MaxMessageSizeInKilobytes>` +
			`</QueueDescription></content></entry>`,
		want: props(lockAndCount, func(p *broker.QueueProperties) {
			p.AutoDeleteOnIdle = time.Hour
			p.EnablePartitioning = true
			p.UserMetadata = "meta"
			p.MaxMessageSizeInKilobytes = 512
		}),
	}, {
		name: "JS: XML declaration, <updated> before <content>, JS's order, round-tripped read-only elements",
		body: `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>` +
			`<entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-21T12:00:00.000Z</updated>` +
			`<content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
			`<MaxDeliveryCount>7</MaxDeliveryCount><ForwardTo>sb://localhost:5300/other</ForwardTo>` +
			`<SizeInBytes>12</SizeInBytes><MessageCount>3</MessageCount>` +
			`<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>3</d2p1:ActiveMessageCount></CountDetails>` +
			`<EntityAvailabilityStatus>Available</EntityAvailabilityStatus><EnableExpress>false</EnableExpress>` +
			`<CreatedAt>2026-01-01T00:00:00Z</CreatedAt><LockDuration>PT30S</LockDuration>` +
			`</QueueDescription></content></entry>`,
		want: props(lockAndCount, func(p *broker.QueueProperties) { p.ForwardTo = "other" }),
	}, {
		name: "Java: every element prefixed, https ForwardTo",
		body: `<?xml version='1.0' encoding='utf-8'?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<wstxns1:QueueDescription xmlns:wstxns1="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<wstxns1:LockDuration>PT30S</wstxns1:LockDuration><wstxns1:MaxDeliveryCount>7</wstxns1:MaxDeliveryCount>` +
			`<wstxns1:ForwardDeadLetteredMessagesTo>https://ns.example/dead</wstxns1:ForwardDeadLetteredMessagesTo>` +
			`</wstxns1:QueueDescription></content></entry>`,
		want: props(lockAndCount, func(p *broker.QueueProperties) {
			p.ForwardDeadLetteredMessagesTo = "dead"
			p.ForwardDeadLetteredMessagesToAddress = "https://ns.example/dead" // echoed as given
		}),
	}, {
		name: "prefixed Atom envelope",
		body: `<a:entry xmlns:a="http://www.w3.org/2005/Atom"><a:content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<MaxDeliveryCount>7</MaxDeliveryCount><LockDuration>PT30S</LockDuration></QueueDescription></a:content></a:entry>`,
		want: props(lockAndCount),
	}, {
		name: "no namespaces at all",
		body: `<entry><content><QueueDescription><LockDuration>PT30S</LockDuration><MaxDeliveryCount>7</MaxDeliveryCount></QueueDescription></content></entry>`,
		want: props(lockAndCount),
	}, {
		name: "bare description without the envelope",
		body: `<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><MaxDeliveryCount>7</MaxDeliveryCount><LockDuration>PT30S</LockDuration></QueueDescription>`,
		want: props(lockAndCount),
	}, {
		name: "same-named element in a foreign namespace is not ours",
		body: `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:x="urn:other">` +
			`<x:LockDuration>garbage</x:LockDuration><LockDuration>PT30S</LockDuration><MaxDeliveryCount>7</MaxDeliveryCount>` +
			`</QueueDescription></content></entry>`,
		want: props(lockAndCount),
	}, {
		name: "empty elements are absent, white space is trimmed, booleans in any case",
		body: `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<LockDuration> PT30S </LockDuration><MaxDeliveryCount>7</MaxDeliveryCount><UserMetadata/>` +
			`<ForwardTo></ForwardTo><DefaultMessageTimeToLive>  </DefaultMessageTimeToLive>` +
			`<RequiresSession>True</RequiresSession><status>Disabled</status><Status>senddisabled</Status>` +
			`</QueueDescription></content></entry>`,
		want: props(lockAndCount, func(p *broker.QueueProperties) {
			p.RequiresSession = true
			p.Status = broker.StatusSendDisabled
		}),
	}, {
		name: "TimeSpan.MaxValue, Java's truncated max and PT60S",
		body: `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<DefaultMessageTimeToLive>P10675199DT2H48M5.477S</DefaultMessageTimeToLive>` +
			`<AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle>` +
			`<LockDuration>PT60S</LockDuration><DuplicateDetectionHistoryTimeWindow>PT1M0S</DuplicateDetectionHistoryTimeWindow>` +
			`</QueueDescription></content></entry>`,
		want: props(func(p *broker.QueueProperties) { p.DuplicateDetectionHistoryTimeWindow = time.Minute }),
	}, {
		name: "authorization rule with Go's XSI prefix and rights in any case",
		body: `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><AuthorizationRules>` +
			`<AuthorizationRule xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="SharedAccessAuthorizationRule">` +
			`<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights><AccessRights>listen</AccessRights><AccessRights>Send</AccessRights><AccessRights>Listen</AccessRights></Rights>` +
			`<KeyName>app</KeyName><CreatedTime>2022-01-12T01:28:26.1670445Z</CreatedTime><ModifiedTime>0001-01-01T00:00:00</ModifiedTime>` +
			`<PrimaryKey>p</PrimaryKey><SecondaryKey>s</SecondaryKey></AuthorizationRule></AuthorizationRules></QueueDescription></content></entry>`,
		want: props(func(p *broker.QueueProperties) {
			created := time.Date(2022, 1, 12, 1, 28, 26, 167044500, time.UTC)
			p.AuthorizationRules = []broker.AuthorizationRule{{
				KeyName: "app", PrimaryKey: "p", SecondaryKey: "s", Rights: []string{"Listen", "Send"},
				CreatedTime: created, // ModifiedTime 0001-01-01: none, kept so
			}}
		}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeQueueBody(tc.body)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			same(t, "properties", got, tc.want)
		})
	}
}

func TestDecodeQueueErrors(t *testing.T) {
	const head = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">`
	const tail = `</QueueDescription></content></entry>`
	for _, tc := range []struct {
		body   string
		status int
		texts  []string
	}{
		{``, 400, []string{"empty"}},
		{`<entry`, 400, []string{"well-formed"}},
		{`<entry></content>`, 400, []string{"well-formed"}},
		{`<feed xmlns="http://www.w3.org/2005/Atom"/>`, 400, []string{"<feed>", "entry"}},
		{`<entry xmlns="http://www.w3.org/2005/Atom"><title>x</title></entry>`, 400, []string{"no <content>"}},
		{`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"></content></entry>`, 400, []string{"no entity description"}},
		{`<?xml version="1.0" encoding="UTF-16"?><entry/>`, 400, []string{"UTF-16"}},
		{head + `<LockDuration>soon</LockDuration>` + tail, 400, []string{"LockDuration", `"soon"`, "ISO 8601"}},
		{head + `<RequiresSession>yes</RequiresSession>` + tail, 400, []string{"RequiresSession", `"yes"`, "boolean"}},
		{head + `<MaxDeliveryCount>ten</MaxDeliveryCount>` + tail, 400, []string{"MaxDeliveryCount", "whole number"}},
		{head + `<MaxDeliveryCount>3000000000</MaxDeliveryCount>` + tail, 400, []string{"MaxDeliveryCount", "out of range", "2147483647"}},
		{head + `<MaxSizeInMegabytes>99999999999999999999</MaxSizeInMegabytes>` + tail, 400, []string{"MaxSizeInMegabytes", "out of range"}},
		{head + `<LockDuration>PT30S</LockDuration><LockDuration>PT40S</LockDuration>` + tail, 400, []string{"LockDuration", "more than once"}},
		{head + `<AuthorizationRules><AuthorizationRule><Rights><AccessRights>Send</AccessRights></Rights></AuthorizationRule></AuthorizationRules>` + tail, 400, []string{"AuthorizationRules", "KeyName"}},
		{head + `<AuthorizationRules><AuthorizationRule><KeyName>k</KeyName></AuthorizationRule></AuthorizationRules>` + tail, 400, []string{"AuthorizationRules", "no rights"}},
		{head + `<AuthorizationRules><AuthorizationRule><KeyName>k</KeyName><Rights><AccessRights>Read</AccessRights></Rights></AuthorizationRule></AuthorizationRules>` + tail, 400, []string{"AuthorizationRules", `"Read"`}},
		{head + `<AuthorizationRules><AuthorizationRule><KeyName>k</KeyName><Rights><AccessRights>Send</AccessRights></Rights><CreatedTime>yesterday</CreatedTime></AuthorizationRule></AuthorizationRules>` + tail, 400, []string{"CreatedTime", "RFC 3339"}},
		{strings.Repeat("<a>", maxDepth+1), 400, []string{"nests"}},
	} {
		_, err := decodeQueueBody(tc.body)
		status, _, msg := httpStatus(err)
		if err == nil || status != tc.status {
			t.Errorf("%.80s: error %v (status %d); want status %d", tc.body, err, status, tc.status)
			continue
		}
		for _, s := range tc.texts {
			if !strings.Contains(msg, s) {
				t.Errorf("%.80s: %q does not mention %q", tc.body, msg, s)
			}
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	body := io.NopCloser(strings.NewReader(`<entry>` + strings.Repeat(" ", maxBodyBytes) + `</entry>`))
	_, err := readBody(body)
	if status, _, _ := httpStatus(err); status != http.StatusRequestEntityTooLarge {
		t.Errorf("error %v, status %d; want 413", err, status)
	}
}

// childNames lists the local names of el's child elements, prefixed as
// written ("d2p1:ActiveMessageCount").
func childNames(t *testing.T, doc, parent string) []string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var names []string
	depth, in := 0, false
	for {
		tok, err := d.RawToken()
		if err != nil {
			break
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			depth++
			name := tk.Name.Local
			if tk.Name.Space != "" {
				name = tk.Name.Space + ":" + name
			}
			if in && depth == 2 {
				names = append(names, name)
			}
			if !in && name == parent {
				in, depth = true, 1
			}
		case xml.EndElement:
			depth--
			if in && depth == 0 {
				return names
			}
		}
	}
	t.Fatalf("no <%s> in %s", parent, doc)
	return nil
}

// fullQueue is a queue with every optional element set.
func fullQueue() Queue {
	created := time.Date(2026, 1, 2, 3, 4, 5, 123456700, time.UTC)
	return Queue{
		Name: "orders/eu",
		Properties: props(func(p *broker.QueueProperties) {
			p.ForwardTo = "next"
			p.ForwardDeadLetteredMessagesTo = "dead"
			p.UserMetadata = `color = 'red' & size < 5 > 2 "q"`
			p.AuthorizationRules = []broker.AuthorizationRule{{KeyName: "k", PrimaryKey: "p", SecondaryKey: "s", Rights: []string{"Send"}, CreatedTime: created, ModifiedTime: created}}
		}),
		CreatedAt:  created,
		UpdatedAt:  created.Add(time.Hour),
		AccessedAt: created.Add(2 * time.Hour),
		Counts:     MessageCounts{Active: 1, DeadLetter: 2, Scheduled: 3, Transfer: 4, TransferDeadLetter: 5, Total: 15, SizeInBytes: 1000},
	}
}

var testSite = &site{scheme: "https", host: "ns.example:5300", apiVersion: "2024-05", namespace: "ns", now: t0}

func renderQueue(q Queue) string {
	var w xmlWriter
	queueEntry(&w, true, q, testSite)
	return string(w.bytes())
}

// TestQueueDescriptionOrder: elements come in the service's order (§1.8),
// optional strings only when set.
func TestQueueDescriptionOrder(t *testing.T) {
	serviceOrder := []string{
		"LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
		"DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
		"MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
		"AuthorizationRules", "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "UserMetadata",
		"SupportOrdering", "CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
		"ForwardDeadLetteredMessagesTo", "EnableExpress", "MaxMessageSizeInKilobytes",
	}
	doc := renderQueue(fullQueue())
	if got := childNames(t, doc, "QueueDescription"); !slices.Equal(got, serviceOrder) {
		t.Errorf("full queue elements\n got %v\nwant %v", got, serviceOrder)
	}

	q := fullQueue()
	q.Properties = broker.DefaultQueueProperties()
	optional := []string{"ForwardTo", "UserMetadata", "ForwardDeadLetteredMessagesTo"}
	want := slices.DeleteFunc(slices.Clone(serviceOrder), func(s string) bool { return slices.Contains(optional, s) })
	if got := childNames(t, renderQueue(q), "QueueDescription"); !slices.Equal(got, want) {
		t.Errorf("default queue elements\n got %v\nwant %v", got, want)
	}

	counts := []string{"d2p1:ActiveMessageCount", "d2p1:DeadLetterMessageCount", "d2p1:ScheduledMessageCount", "d2p1:TransferMessageCount", "d2p1:TransferDeadLetterMessageCount"}
	if got := childNames(t, doc, "CountDetails"); !slices.Equal(got, counts) {
		t.Errorf("CountDetails children %v; want %v", got, counts)
	}
	rule := []string{"ClaimType", "ClaimValue", "Rights", "CreatedTime", "ModifiedTime", "KeyName", "PrimaryKey", "SecondaryKey"}
	if got := childNames(t, doc, "AuthorizationRule"); !slices.Equal(got, rule) {
		t.Errorf("AuthorizationRule children %v; want %v", got, rule)
	}
	entry := []string{"id", "title", "published", "updated", "author", "link", "content"}
	if got := childNames(t, doc, "entry"); !slices.Equal(got, entry) {
		t.Errorf("entry children %v; want %v", got, entry)
	}
}

// TestQueueEntryText pins down the exact text of the parts the SDKs are
// picky about.
func TestQueueEntryText(t *testing.T) {
	doc := renderQueue(fullQueue())
	for _, s := range []string{
		`<entry xmlns="http://www.w3.org/2005/Atom"><id>https://ns.example:5300/orders/eu?api-version=2024-05</id><title type="text">orders/eu</title>`,
		`<published>2026-01-02T03:04:05.1234567Z</published><updated>2026-01-02T04:04:05.1234567Z</updated><author><name>ns</name></author>`,
		`<link rel="self" href="https://ns.example:5300/orders/eu?api-version=2024-05"/><content type="application/xml">`,
		`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><LockDuration>PT1M</LockDuration>`,
		`<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>`,
		`<AuthorizationRule i:type="SharedAccessAuthorizationRule">`,
		`<ForwardTo>sb://ns.example:5300/next</ForwardTo>`,
		`<ForwardDeadLetteredMessagesTo>sb://ns.example:5300/dead</ForwardDeadLetteredMessagesTo>`,
		// Only &, < and > are escaped in text: no &#39; or &#34;.
		`<UserMetadata>color = 'red' &amp; size &lt; 5 &gt; 2 "q"</UserMetadata>`,
		`<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>1</d2p1:ActiveMessageCount>`,
		`<SizeInBytes>1000</SizeInBytes><MessageCount>15</MessageCount>`,
		`<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>`,
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("entry lacks %s\n%s", s, doc)
		}
	}
	if strings.Contains(doc, "&#") {
		t.Errorf("entry uses numeric character references:\n%s", doc)
	}

	q := fullQueue()
	q.AccessedAt = time.Time{}
	if doc := renderQueue(q); !strings.Contains(doc, "<AccessedAt>0001-01-01T00:00:00Z</AccessedAt>") {
		t.Errorf("never-accessed queue:\n%s", doc)
	}
}

// TestQueueRoundTrip: what we write reads back to the same properties, as
// when the JS client sends a GET's result back in an update.
func TestQueueRoundTrip(t *testing.T) {
	q := fullQueue()
	got, err := decodeQueueBody(renderQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	same(t, "round trip", got, q.Properties)
}

func TestParseResource(t *testing.T) {
	for _, tc := range []struct {
		path string
		want resource
	}{
		{"$namespaceinfo", resource{kind: resNamespaceInfo}},
		{"$NamespaceInfo", resource{kind: resNamespaceInfo}},
		{"$Resources/Queues", resource{kind: resQueues}},
		{"$resources/queues", resource{kind: resQueues}},
		{"$RESOURCES/TOPICS", resource{kind: resTopics}},
		{"q1", resource{kind: resEntity, entity: "q1"}},
		{"a/b/c", resource{kind: resEntity, entity: "a/b/c"}},
		{"t/Subscriptions", resource{kind: resSubscriptions, entity: "t"}},
		{"a/b/subscriptions", resource{kind: resSubscriptions, entity: "a/b"}},
		{"t/Subscriptions/s", resource{kind: resSubscription, entity: "t", subscription: "s"}},
		{"a/b/Subscriptions/s/Rules", resource{kind: resRules, entity: "a/b", subscription: "s"}},
		{"t/subscriptions/s/rules/r", resource{kind: resRule, entity: "t", subscription: "s", rule: "r"}},
		{"t/Subscriptions/Rules", resource{kind: resSubscription, entity: "t", subscription: "Rules"}},
		{"Subscriptions", resource{kind: resEntity, entity: "Subscriptions"}},
	} {
		got, err := parseResource(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("parseResource(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "$Resources/Widgets"} {
		if _, err := parseResource(bad); err == nil {
			t.Errorf("parseResource(%q) succeeded", bad)
		}
	}
}

// TestHTTPStatus: the one mapping from errors to status codes.
func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		err     error
		status  int
		subCode int
	}{
		{&broker.Error{Kind: broker.KindNotFound, Msg: "x"}, 404, 40400},
		{&broker.Error{Kind: broker.KindAlreadyExists, Msg: "x"}, 409, 40900},
		{&broker.Error{Kind: broker.KindInvalidArgument, Msg: "x"}, 400, 40000},
		{&broker.Error{Kind: broker.KindNotAllowed, Msg: "x"}, 400, 40000},
		{&broker.Error{Kind: broker.KindQuotaExceeded, Msg: "x"}, 403, 40300},
		{&broker.Error{Kind: broker.KindEntityDisabled, Msg: "x"}, 403, 40301},
		{&broker.Error{Kind: broker.KindClosed, Msg: "x"}, 503, 0},
		{&broker.Error{Kind: broker.KindNoSpace, Msg: "x"}, 507, 0},
		{&broker.Error{Kind: broker.KindStoreFailed, Msg: "x"}, 503, 0},
		{&broker.Error{Kind: broker.KindStoreUnavailable, Msg: "x"}, 503, 0},
		{&broker.Error{Kind: broker.KindMoved, Msg: "x"}, 503, 0},
		{&broker.Error{Kind: broker.KindInternal, Msg: "x"}, 500, 0},
		{errors.New("boom"), 500, 0},
		{badRequest("x"), 400, 40000},
	} {
		status, sub, _ := httpStatus(tc.err)
		if status != tc.status || sub != tc.subCode {
			t.Errorf("%v: %d, %d; want %d, %d", tc.err, status, sub, tc.status, tc.subCode)
		}
	}
	if _, _, msg := httpStatus(errors.New("/secret/path: disk on fire")); strings.Contains(msg, "secret") {
		t.Errorf("internal detail leaked: %q", msg)
	}
}

func TestAppendEscaped(t *testing.T) {
	for _, tc := range []struct {
		in   string
		attr bool
		want string
	}{
		{`a & b < c > d "e" 'f'`, false, `a &amp; b &lt; c &gt; d "e" 'f'`},
		{`a & "b"`, true, `a &amp; &quot;b&quot;`},
		{"tab\tnl\ncr\r", false, "tab\tnl\ncr\r"},
		{"nul\x00 bell\x07 bad\xff é", false, "nul\uFFFD bell\uFFFD bad\uFFFD é"},
	} {
		if got := string(appendEscaped(nil, tc.in, tc.attr)); got != tc.want {
			t.Errorf("appendEscaped(%q, %v) = %q; want %q", tc.in, tc.attr, got, tc.want)
		}
	}
}
