package admin

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// decodeBody parses a body and returns its description element, which
// must be named want.
func decodeBody(t *testing.T, body, want string) *element {
	t.Helper()
	root, err := parseXML(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	desc, err := description(root)
	if err != nil {
		t.Fatalf("description: %v", err)
	}
	if !desc.is(nsServiceBus, want) {
		t.Fatalf("description is <%s>, want <%s>", desc.name.Local, want)
	}
	return desc
}

func topicProps(mods ...func(*broker.TopicProperties)) broker.TopicProperties {
	p := broker.DefaultTopicProperties()
	for _, m := range mods {
		m(&p)
	}
	return p
}

func subProps(mods ...func(*broker.SubscriptionProperties)) broker.SubscriptionProperties {
	p := broker.DefaultSubscriptionProperties()
	for _, m := range mods {
		m(&p)
	}
	return p
}

func TestDecodeTopicLeniency(t *testing.T) {
	sizeAndTTL := func(p *broker.TopicProperties) {
		p.MaxSizeInMegabytes = 2048
		p.DefaultMessageTimeToLive = time.Hour
	}
	for _, tc := range []struct {
		name string
		body string
		want broker.TopicProperties
	}{{
		name: "Go: its field order, empty AuthorizationRules, no xmlns:i",
		body: entryHead + `<TopicDescription ` + sbNS + `><DefaultMessageTimeToLive>PT1H</DefaultMessageTimeToLive>` +
			`<MaxSizeInMegabytes>2048</MaxSizeInMegabytes><AuthorizationRules></AuthorizationRules><Status>SendDisabled</Status>` +
			`<UserMetadata>meta</UserMetadata><SupportOrdering>false</SupportOrdering><AutoDeleteOnIdle>PT10M</AutoDeleteOnIdle>` +
			`<EnablePartitioning>true</EnablePartitioning><MaxMessageSizeInKilobytes>512</MaxMessageSizeInKilobytes></TopicDescription>` + entryTail,
		want: topicProps(sizeAndTTL, func(p *broker.TopicProperties) {
			p.Status = broker.StatusSendDisabled
			p.UserMetadata = "meta"
			p.SupportOrdering = false
			p.AutoDeleteOnIdle = 10 * time.Minute
			p.EnablePartitioning = true
			p.MaxMessageSizeInKilobytes = 512
		}),
	}, {
		name: "JS round trip: declaration, <updated>, read-only elements sent back",
		body: `<?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-21T12:00:00.000Z</updated><content type="application/xml">` +
			`<TopicDescription ` + sbNS + ` xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><MaxSizeInMegabytes>2048</MaxSizeInMegabytes>` +
			`<SizeInBytes>99</SizeInBytes><SubscriptionCount>3</SubscriptionCount><SqlFilterCount>3</SqlFilterCount><CorrelationFilterCount>0</CorrelationFilterCount>` +
			`<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ScheduledMessageCount>1</d2p1:ScheduledMessageCount></CountDetails>` +
			`<EntityAvailabilityStatus>Available</EntityAvailabilityStatus><CreatedAt>2026-01-01T00:00:00Z</CreatedAt>` +
			`<DefaultMessageTimeToLive>PT60M</DefaultMessageTimeToLive><EnableExpress>false</EnableExpress></TopicDescription>` + entryTail,
		want: topicProps(sizeAndTTL),
	}, {
		name: ".NET: legacy flags, duplicate detection",
		body: entryHead + `<TopicDescription ` + sbNS + `><DefaultMessageTimeToLive>PT1H</DefaultMessageTimeToLive><MaxSizeInMegabytes>2048</MaxSizeInMegabytes>` +
			`<RequiresDuplicateDetection>true</RequiresDuplicateDetection><DuplicateDetectionHistoryTimeWindow>PT1M</DuplicateDetectionHistoryTimeWindow>` +
			`<EnableBatchedOperations>false</EnableBatchedOperations><FilteringMessagesBeforePublishing>true</FilteringMessagesBeforePublishing>` +
			`<IsAnonymousAccessible>true</IsAnonymousAccessible><EnableSubscriptionPartitioning>true</EnableSubscriptionPartitioning><EnableExpress>true</EnableExpress>` +
			`</TopicDescription>` + entryTail,
		want: topicProps(sizeAndTTL, func(p *broker.TopicProperties) {
			p.RequiresDuplicateDetection = true
			p.DuplicateDetectionHistoryTimeWindow = time.Minute
			p.EnableBatchedOperations = false
			p.FilteringMessagesBeforePublishing = true
			p.IsAnonymousAccessible = true
			p.EnableSubscriptionPartitioning = true
			p.EnableExpress = true
		}),
	}, {
		name: "Java: every element prefixed",
		body: `<?xml version='1.0' encoding='utf-8'?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
			`<w:TopicDescription xmlns:w="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
			`<w:MaxSizeInMegabytes>2048</w:MaxSizeInMegabytes><w:DefaultMessageTimeToLive>PT1H</w:DefaultMessageTimeToLive></w:TopicDescription>` + entryTail,
		want: topicProps(sizeAndTTL),
	}, {
		name: "nothing: the defaults",
		body: entryHead + `<TopicDescription ` + sbNS + `/>` + entryTail,
		want: topicProps(),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeTopicProperties(decodeBody(t, tc.body, "TopicDescription"), t0)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			same(t, "properties", got, tc.want)
		})
	}
}

func TestDecodeSubscriptionLeniency(t *testing.T) {
	lockAndCount := func(p *broker.SubscriptionProperties) {
		p.LockDuration = 30 * time.Second
		p.MaxDeliveryCount = 4
	}
	for _, tc := range []struct {
		name string
		body string
		want broker.SubscriptionProperties
		rule *broker.RuleDescription
	}{{
		name: "Go: DefaultRuleDescription with Go's XSI prefix, no Status",
		body: entryHead + `<SubscriptionDescription ` + sbNS + `><LockDuration>PT30S</LockDuration>` +
			`<DeadLetteringOnFilterEvaluationExceptions>false</DeadLetteringOnFilterEvaluationExceptions>` +
			`<DefaultRuleDescription><Filter xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="SqlFilter"><SqlExpression>a = @p</SqlExpression>` +
			`<Parameters><KeyValueOfstringanyType><Key>@p</Key><Value xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="l28:int" xmlns:l28="http://www.w3.org/2001/XMLSchema">5</Value></KeyValueOfstringanyType></Parameters>` +
			`</Filter><Name>First</Name></DefaultRuleDescription>` +
			`<MaxDeliveryCount>4</MaxDeliveryCount><ForwardTo>sb://ns.example/q</ForwardTo><AutoDeleteOnIdle>PT1H</AutoDeleteOnIdle></SubscriptionDescription>` + entryTail,
		want: subProps(lockAndCount, func(p *broker.SubscriptionProperties) {
			p.DeadLetteringOnFilterEvaluationExceptions = false
			p.ForwardTo = "q"
			p.AutoDeleteOnIdle = time.Hour
		}),
		rule: &broker.RuleDescription{Name: "First", Filter: broker.SQLRuleFilter("a = @p", map[string]any{"@p": int32(5)})},
	}, {
		name: "JS round trip: read-only elements, Status, an explicit EmptyRuleAction",
		body: `<?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-21T12:00:00.000Z</updated><content type="application/xml">` +
			`<SubscriptionDescription ` + sbNS + ` xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><LockDuration>PT30S</LockDuration><MessageCount>3</MessageCount>` +
			`<MaxDeliveryCount>4</MaxDeliveryCount><Status>receivedisabled</Status><EntityAvailabilityStatus>Available</EntityAvailabilityStatus><IsClientAffine>false</IsClientAffine>` +
			`<DefaultRuleDescription><Filter xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="SqlFilter"><SqlExpression>1=1</SqlExpression></Filter>` +
			`<Action xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="EmptyRuleAction"/><Name>$Default</Name></DefaultRuleDescription>` +
			`<UserMetadata>u</UserMetadata><ForwardDeadLetteredMessagesTo>https://ns.example/dlq</ForwardDeadLetteredMessagesTo></SubscriptionDescription>` + entryTail,
		want: subProps(lockAndCount, func(p *broker.SubscriptionProperties) {
			p.Status = broker.StatusReceiveDisabled
			p.UserMetadata = "u"
			p.ForwardDeadLetteredMessagesTo = "dlq"
			p.ForwardDeadLetteredMessagesToAddress = "https://ns.example/dlq" // echoed as given
		}),
		rule: &broker.RuleDescription{Name: "$Default", Filter: broker.SQLRuleFilter("1=1", nil)},
	}, {
		name: "empty DefaultRuleDescription and elements count as absent",
		body: entryHead + `<SubscriptionDescription ` + sbNS + `><DefaultRuleDescription/><LockDuration>PT30S</LockDuration><MaxDeliveryCount> 4 </MaxDeliveryCount>` +
			`<ForwardTo/><DefaultMessageTimeToLive></DefaultMessageTimeToLive><RequiresSession>0</RequiresSession></SubscriptionDescription>` + entryTail,
		want: subProps(lockAndCount),
	}, {
		name: "a correlation default rule with a SQL action, no namespaces",
		body: `<entry><content><SubscriptionDescription><LockDuration>PT30S</LockDuration><MaxDeliveryCount>4</MaxDeliveryCount>` +
			`<DefaultRuleDescription><Name>ByLabel</Name><Action><SqlExpression>SET x = 1</SqlExpression></Action><Filter><Label>invoice</Label></Filter></DefaultRuleDescription>` +
			`</SubscriptionDescription></content></entry>`,
		want: subProps(lockAndCount),
		rule: &broker.RuleDescription{Name: "ByLabel", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{Label: "invoice"}), Action: &broker.SQLAction{Expression: "SET x = 1"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, rule, err := decodeSubscription(decodeBody(t, tc.body, "SubscriptionDescription"))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			same(t, "properties", got, tc.want)
			same(t, "default rule", rule, tc.rule)
		})
	}
	body := entryHead + `<SubscriptionDescription ` + sbNS + `><DefaultRuleDescription><Name>a</Name></DefaultRuleDescription><DefaultRuleDescription><Name>b</Name></DefaultRuleDescription></SubscriptionDescription>` + entryTail
	if _, _, err := decodeSubscription(decodeBody(t, body, "SubscriptionDescription")); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("two default rules: %v", err)
	}
}

func TestDecodeRuleLeniency(t *testing.T) {
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	kv := func(key, typ, val string) string {
		return `<KeyValueOfstringanyType><Key>` + key + `</Key><Value i:type="` + typ + `" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">` + val + `</Value></KeyValueOfstringanyType>`
	}
	for _, tc := range []struct {
		name string
		body string
		want broker.RuleDescription
	}{{
		name: "Go: SQL filter with every Go type, no action",
		body: ruleBody(`<Filter xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="SqlFilter"><SqlExpression>  a = @s  </SqlExpression><Parameters>` +
			kv("@s", "d6p1:string", " spaced ") + kv("@i", "d6p1:int", "-7") + kv("@d", "d6p1:double", "1.500000") + kv("@b", "d6p1:boolean", "true") +
			kv("@t", "d6p1:dateTime", "2026-03-04T05:06:07Z") + `</Parameters></Filter><Name>go</Name>`),
		want: broker.RuleDescription{Name: "go", Filter: broker.SQLRuleFilter("  a = @s  ", map[string]any{
			"@s": " spaced ", "@i": int32(-7), "@d": 1.5, "@b": true, "@t": when,
		})},
	}, {
		name: ".NET: every .NET type, <Parameters/> on the action, an auto prefix",
		body: ruleBody(`<Filter xmlns:d3p1="http://www.w3.org/2001/XMLSchema-instance" d3p1:type="CorrelationFilter"><CorrelationId>c</CorrelationId><MessageId>m</MessageId><To>t</To>` +
			`<ReplyTo>r</ReplyTo><Label>l</Label><SessionId>s</SessionId><ReplyToSessionId>rs</ReplyToSessionId><ContentType>ct</ContentType><Properties>` +
			kv("l", "d6p1:long", "9000000000") + kv("sh", "d6p1:short", "-3") + kv("by", "d6p1:byte", "-1") + kv("ub", "d6p1:unsignedByte", "255") +
			kv("us", "d6p1:unsignedShort", "65535") + kv("ui", "d6p1:unsignedInt", "4294967295") + kv("ul", "d6p1:unsignedLong", "18446744073709551615") +
			kv("f", "d6p1:float", "0.25") + kv("dec", "d6p1:decimal", "2.5") + kv("inf", "d6p1:double", "INF") +
			`<KeyValueOfstringanyType><Key>dur</Key><Value i:type="ser:duration" xmlns:ser="http://schemas.microsoft.com/2003/10/Serialization/">PT1M30S</Value></KeyValueOfstringanyType>` +
			`<KeyValueOfstringanyType><Key>g</Key><Value i:type="ser:guid" xmlns:ser="http://schemas.microsoft.com/2003/10/Serialization/">00112233-4455-6677-8899-aabbccddeeff</Value></KeyValueOfstringanyType>` +
			`<KeyValueOfstringanyType><Key>ch</Key><Value i:type="ser:char" xmlns:ser="http://schemas.microsoft.com/2003/10/Serialization/">65</Value></KeyValueOfstringanyType>` +
			`<KeyValueOfstringanyType><Key>local</Key><Value i:type="d6p1:dateTime">2026-03-04T05:06:07.5</Value></KeyValueOfstringanyType>` +
			`</Properties></Filter><Action i:type="SqlRuleAction"><SqlExpression>SET a = @v</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters>` +
			kv("@v", "d6p1:string", "x") + `</Parameters></Action><Name>net</Name>`),
		want: broker.RuleDescription{Name: "net", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{
			CorrelationID: "c", MessageID: "m", To: "t", ReplyTo: "r", Label: "l", SessionID: "s", ReplyToSessionID: "rs", ContentType: "ct",
			Properties: map[string]any{
				"l": int64(9000000000), "sh": int16(-3), "by": int8(-1), "ub": uint8(255), "us": uint16(65535), "ui": uint32(4294967295),
				"ul": uint64(math.MaxUint64), "f": float32(0.25), "dec": 2.5, "inf": math.Inf(1), "dur": 90 * time.Second,
				"g":  message.UUID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff},
				"ch": message.Char('A'), "local": time.Date(2026, 3, 4, 5, 6, 7, 500000000, time.UTC),
			},
		}), Action: &broker.SQLAction{Expression: "SET a = @v", Parameters: map[string]any{"@v": "x"}}},
	}, {
		name: "JS: correlation filter in JS's order, every number a double, explicit EmptyRuleAction",
		body: ruleBody(`<Filter xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="CorrelationFilter"><CorrelationId>c</CorrelationId><Label>l</Label>` +
			`<ReplyToSessionId>rs</ReplyToSessionId><MessageId>m</MessageId><Properties>` + kv("n", "l28:double", "2") + `</Properties></Filter>` +
			`<Action xmlns:p4="http://www.w3.org/2001/XMLSchema-instance" p4:type="EmptyRuleAction"/><Name>js</Name>`),
		want: broker.RuleDescription{Name: "js", Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{
			CorrelationID: "c", Label: "l", ReplyToSessionID: "rs", MessageID: "m", Properties: map[string]any{"n": 2.0},
		})},
	}, {
		name: "Java: prefixed elements, true filter",
		body: entryHead + `<w:RuleDescription xmlns:w="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:x="http://www.w3.org/2001/XMLSchema-instance">` +
			`<w:Filter x:type="TrueFilter"><w:SqlExpression>1=1</w:SqlExpression></w:Filter><w:Action x:type="EmptyRuleAction"/><w:Name>java</w:Name></w:RuleDescription>` + entryTail,
		want: broker.RuleDescription{Name: "java", Filter: broker.TrueRuleFilter()},
	}, {
		name: "a round-tripped GET: CreatedAt, CompatibilityLevel and empty lists ignored",
		body: ruleBody(`<Filter i:type="FalseFilter"><SqlExpression>1=0</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>` +
			`<Action i:type="SqlRuleAction"><SqlExpression>REMOVE x</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters/></Action>` +
			`<CreatedAt>2026-01-01T00:00:00Z</CreatedAt><Name>rt</Name>`),
		want: broker.RuleDescription{Name: "rt", Filter: broker.FalseRuleFilter(), Action: &broker.SQLAction{Expression: "REMOVE x"}},
	}, {
		name: "untyped: a SqlExpression makes a SQL filter; no filter is a TrueFilter; an untyped value is a string",
		body: ruleBody(`<Action><SqlExpression>SET a = @v</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@v</Key><Value>plain</Value></KeyValueOfstringanyType></Parameters></Action>`),
		want: broker.RuleDescription{Filter: broker.TrueRuleFilter(), Action: &broker.SQLAction{Expression: "SET a = @v", Parameters: map[string]any{"@v": "plain"}}},
	}, {
		name: "escaped text comes back unescaped; an undeclared i prefix is accepted",
		body: entryHead + `<RuleDescription ` + sbNS + `><Filter i:type="SqlFilter"><SqlExpression>a &lt; 5 AND b = 'x&amp;y' AND c &gt; 1</SqlExpression></Filter></RuleDescription>` + entryTail,
		want: broker.RuleDescription{Filter: broker.SQLRuleFilter("a < 5 AND b = 'x&y' AND c > 1", nil)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRule(decodeBody(t, tc.body, "RuleDescription"))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			sameRule(t, got, tc.want)
		})
	}
}

// sameRule compares rules field by field (JSON cannot carry +Inf).
func sameRule(t *testing.T, got, want broker.RuleDescription) {
	t.Helper()
	if got.Name != want.Name || got.Filter.Kind != want.Filter.Kind || got.Filter.Expression != want.Filter.Expression || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("rule %+v\nwant %+v", got, want)
	}
	sameMap(t, "filter parameters", got.Filter.Parameters, want.Filter.Parameters)
	if (got.Filter.Correlation == nil) != (want.Filter.Correlation == nil) {
		t.Fatalf("correlation %+v; want %+v", got.Filter.Correlation, want.Filter.Correlation)
	}
	if got.Filter.Correlation != nil {
		g, w := *got.Filter.Correlation, *want.Filter.Correlation
		sameMap(t, "correlation properties", g.Properties, w.Properties)
		g.Properties, w.Properties = nil, nil
		same(t, "correlation", g, w)
	}
	if (got.Action == nil) != (want.Action == nil) {
		t.Fatalf("action %+v; want %+v", got.Action, want.Action)
	}
	if got.Action != nil {
		if got.Action.Expression != want.Action.Expression {
			t.Errorf("action %q; want %q", got.Action.Expression, want.Action.Expression)
		}
		sameMap(t, "action parameters", got.Action.Parameters, want.Action.Parameters)
	}
}

// sameMap compares typed values with their types.
func sameMap(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %#v; want %#v", what, got, want)
		return
	}
	for k, w := range want {
		g := got[k]
		if gt, ok := g.(time.Time); ok {
			if wt, ok := w.(time.Time); !ok || !gt.Equal(wt) {
				t.Errorf("%s[%s] = %#v; want %#v", what, k, g, w)
			}
			continue
		}
		if g != w {
			t.Errorf("%s[%s] = %#v (%T); want %#v (%T)", what, k, g, g, w, w)
		}
	}
}

func TestDecodeRuleErrors(t *testing.T) {
	val := func(typ, v string) string {
		return `<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@p</Key>` +
			`<Value i:type="d6p1:` + typ + `" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">` + v + `</Value></KeyValueOfstringanyType></Parameters></Filter>`
	}
	for _, tc := range []struct {
		inner string
		texts []string
	}{
		{`<Filter i:type="BloomFilter"/>`, []string{"Filter", `"BloomFilter"`}},
		{`<Filter><CompatibilityLevel>20</CompatibilityLevel></Filter>`, []string{"Filter", "no i:type"}},
		{`<Filter i:type="SqlFilter"/>`, []string{"Filter", "SqlExpression"}},
		{`<Filter i:type="SqlFilter"><SqlExpression>  </SqlExpression></Filter>`, []string{"Filter", "SqlExpression"}},
		{`<Filter i:type="TrueFilter"/><Action i:type="SqlRuleAction"/>`, []string{"Action", "SqlExpression"}},
		{`<Filter i:type="TrueFilter"/><Action i:type="RouteAction"/>`, []string{"Action", `"RouteAction"`}},
		{`<Filter i:type="TrueFilter"/><Filter i:type="TrueFilter"/>`, []string{"Filter", "more than once"}},
		{`<Name>a</Name><Name>b</Name>`, []string{"Name", "more than once"}},
		{val("int", "5000000000"), []string{"Filter Parameters", "@p", "an int", "2147483647"}},
		{val("int", "five"), []string{"@p", "an int"}},
		{val("unsignedByte", "-1"), []string{"@p", "unsignedByte", "255"}},
		{val("boolean", "yes"), []string{"@p", "boolean"}},
		{val("double", "1,5"), []string{"@p", "double"}},
		{val("dateTime", "yesterday"), []string{"@p", "dateTime"}},
		{val("duration", "1 minute"), []string{"@p", "ISO 8601"}},
		{val("guid", "not-a-guid"), []string{"@p", "guid"}},
		{val("char", "-1"), []string{"@p", "char"}},
		{val("base64Binary", "AAA="), []string{"@p", `"base64Binary"`, "not supported"}},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@p</Key><Value i:nil="true"/></KeyValueOfstringanyType></Parameters></Filter>`, []string{"@p", "null"}},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Value>x</Value></KeyValueOfstringanyType></Parameters></Filter>`, []string{"Filter Parameters", "no Key"}},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@p</Key></KeyValueOfstringanyType></Parameters></Filter>`, []string{"@p", "no Value"}},
		{`<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>k</Key><Value>1</Value></KeyValueOfstringanyType><KeyValueOfstringanyType><Key>k</Key><Value>2</Value></KeyValueOfstringanyType></Properties></Filter>`, []string{"CorrelationFilter Properties", `"k"`, "more than once"}},
	} {
		_, err := decodeRule(decodeBody(t, ruleBody(tc.inner), "RuleDescription"))
		status, _, msg := httpStatus(err)
		if err == nil || status != 400 {
			t.Errorf("%s: error %v (status %d); want 400", tc.inner, err, status)
			continue
		}
		for _, s := range tc.texts {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: %q does not mention %q", tc.inner, msg, s)
			}
		}
	}
}

// TestTypedValueRoundTrip: every value type a rule can hold is written
// with a type that reads back to the same Go type and value.
func TestTypedValueRoundTrip(t *testing.T) {
	values := map[string]any{
		"s": "a < b & 'c'", "sym": message.Symbol("sym"), "b": false, "i": 7, "big": 1 << 40, "i8": int8(-8), "i16": int16(-16), "i32": int32(-32), "i64": int64(-64),
		"u8": uint8(8), "u16": uint16(16), "u32": uint32(32), "u64": uint64(math.MaxUint64), "f32": float32(1.25), "f64": 1e-9,
		"huge": 1.5e300, "nan-free": -0.5, "minf": math.Inf(-1), "t": time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), "d": 36 * time.Hour,
		"g": message.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, "c": message.Char('é'),
	}
	want := map[string]any{}
	for k, v := range values {
		want[k] = v
	}
	// Types XML Schema has no name for come back as their nearest one.
	want["sym"] = "sym"
	want["i"] = int32(7)
	want["big"] = int64(1 << 40)
	var w xmlWriter
	w.open("RuleDescription", "xmlns", nsServiceBus, "xmlns:i", nsXSI)
	writeKeyValues(&w, "Parameters", "d6p1", values)
	w.close("RuleDescription")
	desc := decodeBody(t, string(w.bytes()), "RuleDescription")
	got, err := decodeKeyValues(desc.child("Parameters"), "Parameters")
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, w.bytes())
	}
	sameMap(t, "round trip", got, want)
	doc := string(w.bytes())
	for _, s := range []string{
		`<KeyValueOfstringanyType><Key>b</Key><Value i:type="d6p1:boolean" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">false</Value></KeyValueOfstringanyType>`,
		`<Value i:type="d6p1:string" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">a &lt; b &amp; 'c'</Value>`,
		`<Value i:type="d6p1:int" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">-32</Value>`,
		`<Value i:type="d6p1:long" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">-64</Value>`,
		`<Value i:type="d6p1:double" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">1E-09</Value>`,
		`<Value i:type="d6p1:double" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">-0.5</Value>`,
		`<Value i:type="d6p1:double" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">-INF</Value>`,
		`<Value i:type="d6p1:dateTime" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">2026-01-02T03:04:05.000006Z</Value>`,
		`<Value i:type="d6p1:duration" xmlns:d6p1="http://schemas.microsoft.com/2003/10/Serialization/">P1DT12H</Value>`,
		`<Value i:type="d6p1:guid" xmlns:d6p1="http://schemas.microsoft.com/2003/10/Serialization/">01020304-0506-0708-090a-0b0c0d0e0f10</Value>`,
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("typed values lack %s\n%s", s, doc)
		}
	}
	// Keys in order.
	var keys []string
	for _, kv := range desc.child("Parameters").children {
		keys = append(keys, kv.child("Key").value())
	}
	if !slices.IsSorted(keys) {
		t.Errorf("keys not sorted: %v", keys)
	}
	if strings.Contains(doc, "&#") {
		t.Errorf("numeric character references:\n%s", doc)
	}
}

func TestFormatXSDFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{{0, "0"}, {2, "2"}, {1.5, "1.5"}, {1234567, "1234567"}, {0.00001, "0.00001"}, {1e-6, "1E-06"}, {1e15, "1E+15"}, {math.NaN(), "NaN"}} {
		if got := formatXSDFloat(tc.f, 64); got != tc.want {
			t.Errorf("formatXSDFloat(%v) = %q; want %q", tc.f, got, tc.want)
		}
	}
}

// fullTopic is a topic with every optional element set.
func fullTopic() Topic {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Topic{
		Name: "news/eu",
		Properties: topicProps(func(p *broker.TopicProperties) {
			p.UserMetadata = `tier = 'gold' & x < 1`
			p.AuthorizationRules = []broker.AuthorizationRule{{KeyName: "k", PrimaryKey: "p", SecondaryKey: "s", Rights: []string{"Send"}, CreatedTime: created, ModifiedTime: created}}
		}),
		CreatedAt: created, UpdatedAt: created.Add(time.Hour), AccessedAt: created.Add(2 * time.Hour),
		SubscriptionCount: 3, SQLFilterCount: 4, CorrelationFilterCount: 5,
		Counts: MessageCounts{Scheduled: 2, Total: 2, SizeInBytes: 300},
	}
}

func renderTopic(tp Topic) string {
	var w xmlWriter
	topicEntry(&w, true, tp, testSite)
	return string(w.bytes())
}

// TestTopicDescriptionOrder: the service's order (§1.8), UserMetadata only
// when set, and the runtime elements.
func TestTopicDescriptionOrder(t *testing.T) {
	serviceOrder := []string{
		"DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "DuplicateDetectionHistoryTimeWindow",
		"EnableBatchedOperations", "SizeInBytes", "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules",
		"Status", "CreatedAt", "UpdatedAt", "AccessedAt", "UserMetadata", "SupportOrdering", "CountDetails", "SubscriptionCount",
		"SqlFilterCount", "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
		"EnableSubscriptionPartitioning", "EnableExpress", "MaxMessageSizeInKilobytes",
	}
	doc := renderTopic(fullTopic())
	if got := childNames(t, doc, "TopicDescription"); !slices.Equal(got, serviceOrder) {
		t.Errorf("full topic elements\n got %v\nwant %v", got, serviceOrder)
	}
	tp := fullTopic()
	tp.Properties = broker.DefaultTopicProperties()
	want := slices.DeleteFunc(slices.Clone(serviceOrder), func(s string) bool { return s == "UserMetadata" })
	if got := childNames(t, renderTopic(tp), "TopicDescription"); !slices.Equal(got, want) {
		t.Errorf("default topic elements\n got %v\nwant %v", got, want)
	}
	for _, s := range []string{
		`<entry xmlns="http://www.w3.org/2005/Atom"><id>https://ns.example:5300/news/eu?api-version=2024-05</id><title type="text">news/eu</title>`,
		`<author><name>ns</name></author>`,
		`<TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>`,
		`<SizeInBytes>300</SizeInBytes>`,
		`<UserMetadata>tier = 'gold' &amp; x &lt; 1</UserMetadata>`,
		`<d2p1:ScheduledMessageCount>2</d2p1:ScheduledMessageCount>`,
		`<SubscriptionCount>3</SubscriptionCount><SqlFilterCount>4</SqlFilterCount><CorrelationFilterCount>5</CorrelationFilterCount>`,
		`<AccessedAt>2026-01-02T05:04:05Z</AccessedAt>`,
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("topic entry lacks %s\n%s", s, doc)
		}
	}
	// What we write reads back to the same properties.
	got, err := decodeTopicProperties(decodeBody(t, doc, "TopicDescription"), t0)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "topic round trip", got, fullTopic().Properties)
}

func fullSubscription() Subscription {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Subscription{
		TopicName: "news/eu", Name: "s1",
		Properties: subProps(func(p *broker.SubscriptionProperties) {
			p.ForwardTo = "next"
			p.ForwardDeadLetteredMessagesTo = "dead"
			p.UserMetadata = "meta"
		}),
		CreatedAt: created, UpdatedAt: created.Add(time.Hour),
		Counts: MessageCounts{Active: 1, DeadLetter: 2, Scheduled: 3, Transfer: 4, TransferDeadLetter: 5, Total: 15, SizeInBytes: 99},
	}
}

func renderSubscription(s Subscription) string {
	var w xmlWriter
	subscriptionEntry(&w, true, s, testSite)
	return string(w.bytes())
}

func TestSubscriptionDescriptionOrder(t *testing.T) {
	serviceOrder := []string{
		"LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration",
		"DeadLetteringOnFilterEvaluationExceptions", "MessageCount", "MaxDeliveryCount", "EnableBatchedOperations", "Status",
		"ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "UserMetadata", "CountDetails", "ForwardDeadLetteredMessagesTo",
		"AutoDeleteOnIdle", "EntityAvailabilityStatus", "IsClientAffine",
	}
	doc := renderSubscription(fullSubscription())
	if got := childNames(t, doc, "SubscriptionDescription"); !slices.Equal(got, serviceOrder) {
		t.Errorf("full subscription elements\n got %v\nwant %v", got, serviceOrder)
	}
	s := fullSubscription()
	s.Properties = broker.DefaultSubscriptionProperties()
	optional := []string{"ForwardTo", "UserMetadata", "ForwardDeadLetteredMessagesTo"}
	want := slices.DeleteFunc(slices.Clone(serviceOrder), func(s string) bool { return slices.Contains(optional, s) })
	if got := childNames(t, renderSubscription(s), "SubscriptionDescription"); !slices.Equal(got, want) {
		t.Errorf("default subscription elements\n got %v\nwant %v", got, want)
	}
	// Entries of subscriptions have no author.
	entry := []string{"id", "title", "published", "updated", "link", "content"}
	if got := childNames(t, doc, "entry"); !slices.Equal(got, entry) {
		t.Errorf("entry children %v; want %v", got, entry)
	}
	for _, s := range []string{
		`<id>https://ns.example:5300/news/eu/Subscriptions/s1?api-version=2024-05</id><title type="text">s1</title>`,
		`<MessageCount>15</MessageCount>`,
		`<ForwardTo>sb://ns.example:5300/next</ForwardTo>`,
		`<ForwardDeadLetteredMessagesTo>sb://ns.example:5300/dead</ForwardDeadLetteredMessagesTo>`,
		`<AccessedAt>0001-01-01T00:00:00Z</AccessedAt>`,
		`<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>1</d2p1:ActiveMessageCount><d2p1:DeadLetterMessageCount>2</d2p1:DeadLetterMessageCount><d2p1:ScheduledMessageCount>3</d2p1:ScheduledMessageCount><d2p1:TransferMessageCount>4</d2p1:TransferMessageCount><d2p1:TransferDeadLetterMessageCount>5</d2p1:TransferDeadLetterMessageCount></CountDetails>`,
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("subscription entry lacks %s\n%s", s, doc)
		}
	}
	if strings.Contains(doc, "DefaultRuleDescription") {
		t.Errorf("DefaultRuleDescription written back:\n%s", doc)
	}
	got, rule, err := decodeSubscription(decodeBody(t, doc, "SubscriptionDescription"))
	if err != nil || rule != nil {
		t.Fatalf("decode: %v, %v", rule, err)
	}
	same(t, "subscription round trip", got, fullSubscription().Properties)
}

func renderRule(r broker.RuleDescription) string {
	var w xmlWriter
	ruleEntry(&w, true, "news/eu", "s1", r, testSite)
	return string(w.bytes())
}

// TestRuleDescriptionOrder: Filter, Action (always), CreatedAt, Name; the
// children of each filter kind in the service's order.
func TestRuleDescriptionOrder(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	full := broker.CorrelationFilter{CorrelationID: "c", MessageID: "m", To: "t", ReplyTo: "r", Label: "l", SessionID: "s",
		ReplyToSessionID: "rs", ContentType: "ct", Properties: map[string]any{"k": "v"}}
	for _, tc := range []struct {
		name   string
		rule   broker.RuleDescription
		filter []string
		action []string
		texts  []string
	}{{
		name:   "sql with action",
		rule:   broker.RuleDescription{Filter: broker.SQLRuleFilter(`color = 'red' AND size < @max`, map[string]any{"@max": int32(5)}), Action: &broker.SQLAction{Expression: "SET a = 'b'"}},
		filter: []string{"SqlExpression", "CompatibilityLevel", "Parameters"},
		action: []string{"SqlExpression", "CompatibilityLevel", "Parameters"},
		texts: []string{
			`<Filter i:type="SqlFilter"><SqlExpression>color = 'red' AND size &lt; @max</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters><KeyValueOfstringanyType><Key>@max</Key><Value i:type="d6p1:int" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">5</Value></KeyValueOfstringanyType></Parameters></Filter>`,
			`<Action i:type="SqlRuleAction"><SqlExpression>SET a = 'b'</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters/></Action>`,
		},
	}, {
		name:   "sql without parameters",
		rule:   broker.RuleDescription{Filter: broker.SQLRuleFilter("1=1", nil)},
		filter: []string{"SqlExpression", "CompatibilityLevel", "Parameters"},
		texts:  []string{`<Filter i:type="SqlFilter"><SqlExpression>1=1</SqlExpression><CompatibilityLevel>20</CompatibilityLevel><Parameters/></Filter><Action i:type="EmptyRuleAction"/>`},
	}, {
		name:   "true",
		rule:   broker.RuleDescription{Filter: broker.TrueRuleFilter()},
		filter: []string{"SqlExpression", "CompatibilityLevel"},
		texts:  []string{`<Filter i:type="TrueFilter"><SqlExpression>1=1</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>`},
	}, {
		name:   "false",
		rule:   broker.RuleDescription{Filter: broker.FalseRuleFilter()},
		filter: []string{"SqlExpression", "CompatibilityLevel"},
		texts:  []string{`<Filter i:type="FalseFilter"><SqlExpression>1=0</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>`},
	}, {
		name:   "correlation, every field",
		rule:   broker.RuleDescription{Filter: broker.CorrelationRuleFilter(full)},
		filter: []string{"CorrelationId", "MessageId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId", "ContentType", "Properties"},
		texts:  []string{`<Properties><KeyValueOfstringanyType><Key>k</Key><Value i:type="d5p1:string" xmlns:d5p1="http://www.w3.org/2001/XMLSchema">v</Value></KeyValueOfstringanyType></Properties>`},
	}, {
		name:   "correlation, unset fields omitted",
		rule:   broker.RuleDescription{Filter: broker.CorrelationRuleFilter(broker.CorrelationFilter{Label: "l"})},
		filter: []string{"Label", "Properties"},
		texts:  []string{`<Filter i:type="CorrelationFilter"><Label>l</Label><Properties/></Filter>`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			r.Name, r.CreatedAt = "r1", created
			doc := renderRule(r)
			if got := childNames(t, doc, "RuleDescription"); !slices.Equal(got, []string{"Filter", "Action", "CreatedAt", "Name"}) {
				t.Errorf("RuleDescription children %v", got)
			}
			if got := childNames(t, doc, "Filter"); !slices.Equal(got, tc.filter) {
				t.Errorf("Filter children %v; want %v", got, tc.filter)
			}
			if got := childNames(t, doc, "Action"); !slices.Equal(got, tc.action) {
				t.Errorf("Action children %v; want %v", got, tc.action)
			}
			for _, s := range append(tc.texts,
				`<entry xmlns="http://www.w3.org/2005/Atom"><id>https://ns.example:5300/news/eu/Subscriptions/s1/Rules/r1?api-version=2024-05</id><title type="text">r1</title><published>2026-01-02T03:04:05Z</published><updated>2026-01-02T03:04:05Z</updated><link `,
				`<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter`,
				`<CreatedAt>2026-01-02T03:04:05Z</CreatedAt><Name>r1</Name></RuleDescription>`,
			) {
				if !strings.Contains(doc, s) {
					t.Errorf("rule entry lacks %s\n%s", s, doc)
				}
			}
			if strings.Contains(doc, "<author>") || strings.Contains(doc, "&#") {
				t.Errorf("author or numeric character reference in\n%s", doc)
			}
			// What we write reads back to the same rule.
			got, err := decodeRule(decodeBody(t, doc, "RuleDescription"))
			if err != nil {
				t.Fatal(err)
			}
			want := r
			want.CreatedAt = time.Time{}
			if want.Filter.Kind == broker.FilterCorrelation && want.Filter.Correlation.Properties == nil {
				want.Filter.Correlation = &broker.CorrelationFilter{Label: "l"}
			}
			sameRule(t, got, want)
		})
	}
}

func TestXSIType(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`<F xmlns:i="http://www.w3.org/2001/XMLSchema-instance" i:type="SqlFilter"/>`, "SqlFilter"},
		{`<F xmlns:x="http://www.w3.org/2001/XMLSchema-instance" x:type="d2p1:TrueFilter"/>`, "TrueFilter"},
		{`<F i:type="FalseFilter"/>`, "FalseFilter"},
		{`<F type="SqlFilter"/>`, ""},
		{`<F xmlns:type="urn:x"/>`, ""},
		{`<F/>`, ""},
	} {
		e, err := parseXML(strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := e.xsiType(); got != tc.want {
			t.Errorf("xsiType(%s) = %q; want %q", tc.body, got, tc.want)
		}
	}
}
