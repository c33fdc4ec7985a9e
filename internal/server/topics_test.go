package server

import (
	"strings"
	"testing"

	"github.com/busbarmq/busbar/internal/config"
)

const topicConfig = `{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [ { "Name": "audit" } ],
        "Topics": [
          {
            "Name": "topic.1",
            "Properties": { "DefaultMessageTimeToLive": "PT1H", "RequiresDuplicateDetection": false },
            "Subscriptions": [
              {
                "Name": "subscription.1",
                "Properties": { "MaxDeliveryCount": 3, "ForwardTo": "audit" },
                "Rules": [
                  { "Name": "app-prop-filter-1", "Properties": { "FilterType": "Correlation",
                      "CorrelationFilter": { "ContentType": "application/text", "CorrelationId": "id1",
                        "Label": "subject1", "Properties": { "prop3": "value3" } } } }
                ]
              },
              {
                "Name": "subscription.2",
                "Rules": [
                  { "Name": "sql-filter-1", "Properties": { "FilterType": "Sql",
                      "SqlFilter": { "SqlExpression": "sys.MessageId = '123456' AND userProp1 = 'value1'" },
                      "Action": { "SqlExpression": "SET sys.To = 'Entity'" } } },
                  { "Name": "sql-filter-2", "Properties": { "FilterType": "Sql",
                      "SqlFilter": { "SqlExpression": "color = 'red'" } } }
                ]
              },
              { "Name": "subscription.3" }
            ]
          }
        ]
      }
    ],
    "Logging": { "Type": "File" }
  }
}`

func TestConfigTopicsSubscriptionsRules(t *testing.T) {
	dir := t.TempDir()
	ec, err := config.LoadEmulatorConfig(strings.NewReader(topicConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec})
	check := func() {
		t.Helper()
		b := s.Broker()
		if _, err := b.GetTopic("topic.1"); err != nil {
			t.Fatalf("topic: %v", err)
		}
		sub1, err := b.GetSubscription("topic.1", "subscription.1")
		if err != nil {
			t.Fatal(err)
		}
		if sub1.Properties.MaxDeliveryCount != 3 || sub1.Properties.ForwardTo != "audit" {
			t.Fatalf("subscription.1 properties = %+v", sub1.Properties)
		}
		want := map[string][]string{
			"subscription.1": {"app-prop-filter-1"},
			"subscription.2": {"sql-filter-1", "sql-filter-2"},
			"subscription.3": {"$Default"},
		}
		for sub, names := range want {
			rules, err := b.ListRules("topic.1", sub, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rules {
				got = append(got, r.Name)
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Fatalf("%s rules = %v, want %v", sub, got, names)
			}
		}
	}
	check()
	stop(t, s)
	// Restart with the same file: everything is found and updated, nothing
	// duplicated.
	s = start(t, Options{Server: config.Server{DataDir: dir}, Entities: ec})
	defer stop(t, s)
	check()
}
