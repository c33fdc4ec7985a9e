package config

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// roundTrip marshals c, loads the result and checks it equals c.
func roundTrip(t *testing.T, c *EmulatorConfig) []byte {
	t.Helper()
	out, err := c.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	back, err := ParseEmulatorConfig(out, Options{})
	if err != nil {
		t.Fatalf("loading Marshal's output: %v\n%s", err, out)
	}
	want := *c
	want.Warnings, back.Warnings = nil, nil
	if !reflect.DeepEqual(back, &want) {
		t.Fatalf("round trip changed the configuration:\n%s", out)
	}
	return out
}

func TestMarshalRoundTripSample(t *testing.T) {
	cfg, err := LoadEmulatorConfigFile(filepath.Join("testdata", "emulator-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := roundTrip(t, cfg)
	for _, want := range []string{
		`"Name": "sbemulatorns"`,
		`"LockDuration": "PT1M"`,
		`"DefaultMessageTimeToLive": "PT1H"`,
		`"DuplicateDetectionHistoryTimeWindow": "PT20S"`,
		`"FilterType": "Correlation"`,
		`"SqlExpression": "sys.Label = 'invoice' AND amount > 1000"`,
		`"Logging": {`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), `"ForwardTo"`) {
		t.Errorf("unset ForwardTo written:\n%s", out)
	}
}

func TestMarshalRoundTripEverything(t *testing.T) {
	c := &EmulatorConfig{
		Namespaces: []Namespace{
			{
				Name: "ns1",
				Queues: []Queue{
					{Name: "all/props", Props: QueueProps{
						LockDuration:                        dur(30 * time.Second),
						MaxSizeInMegabytes:                  ptr(int64(2048)),
						RequiresDuplicateDetection:          ptr(true),
						DuplicateDetectionHistoryTimeWindow: dur(time.Hour + 500*time.Millisecond),
						RequiresSession:                     ptr(false),
						DefaultMessageTimeToLive:            dur(MaxDuration),
						DeadLetteringOnMessageExpiration:    ptr(true),
						MaxDeliveryCount:                    ptr(int32(10)),
						EnableBatchedOperations:             ptr(true),
						AutoDeleteOnIdle:                    dur(14 * day),
						Status:                              ptr(StatusActive),
						ForwardTo:                           ptr("plain"),
						ForwardDeadLetteredMessagesTo:       ptr("sb://localhost/plain"),
						UserMetadata:                        ptr(`<xml> & "quotes" // é`),
						EnablePartitioning:                  ptr(false),
						SupportOrdering:                     ptr(true),
						MaxMessageSizeInKilobytes:           ptr(int64(1024)),
					}},
					{Name: "plain"},
				},
				Topics: []Topic{{
					Name: "t",
					Props: TopicProps{
						DefaultMessageTimeToLive:            dur(time.Second),
						DuplicateDetectionHistoryTimeWindow: dur(7 * day),
						RequiresDuplicateDetection:          ptr(true),
						MaxSizeInMegabytes:                  ptr(int64(1)),
						AutoDeleteOnIdle:                    dur(MaxDuration),
						Status:                              ptr(StatusSendDisabled),
						UserMetadata:                        ptr(""),
						EnableBatchedOperations:             ptr(false),
						EnablePartitioning:                  ptr(true),
						SupportOrdering:                     ptr(false),
						MaxMessageSizeInKilobytes:           ptr(int64(102400)),
					},
					Subscriptions: []Subscription{
						{Name: "s1", Props: SubscriptionProps{
							LockDuration:                              dur(5 * time.Minute),
							RequiresSession:                           ptr(true),
							DefaultMessageTimeToLive:                  dur(time.Hour),
							DeadLetteringOnMessageExpiration:          ptr(false),
							DeadLetteringOnFilterEvaluationExceptions: ptr(true),
							MaxDeliveryCount:                          ptr(int32(1)),
							EnableBatchedOperations:                   ptr(true),
							AutoDeleteOnIdle:                          dur(5 * time.Minute),
							Status:                                    ptr(StatusReceiveDisabled),
							ForwardTo:                                 ptr("t"),
							ForwardDeadLetteredMessagesTo:             ptr("plain"),
							UserMetadata:                              ptr("m"),
						}, Rules: []Rule{
							{Name: "$Default", Filter: Filter{Type: FilterSQL, SQL: "1=1"}},
							{Name: "corr", Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
								ContentType: ptr("application/json"), CorrelationID: ptr("c"), Label: ptr("l"),
								MessageID: ptr("m"), ReplyTo: ptr("r"), ReplyToSessionID: ptr("rs"),
								SessionID: ptr(""), To: ptr("to"),
								Properties: map[string]any{
									"s": "v", "i": int64(-7), "f": 1.5, "whole": 2.0, "tiny": 1e-300,
									"huge": 1e300, "neg0": math.Copysign(0, -1), "t": true, "x": false, "max": int64(9223372036854775807),
								},
							}}, Action: "SET a = 1"},
							{Name: "sql", Filter: Filter{Type: FilterSQL, SQL: "a > 1 AND b < 2 AND c <> 'x & y'"}},
						}},
						{Name: "s2"},
					},
				}},
			},
			{Name: "ns2"},
		},
		Logging: &Logging{Type: "Console"},
	}
	if err := c.Validate(Options{}); err != nil {
		t.Fatal(err)
	}
	out := roundTrip(t, c)
	if !strings.Contains(string(out), `"whole": 2.0`) || !strings.Contains(string(out), `c <> 'x & y'`) {
		t.Errorf("unexpected output:\n%s", out)
	}

	// No Logging and no entities round-trip too.
	roundTrip(t, &EmulatorConfig{Namespaces: []Namespace{{Name: "sbemulatorns"}}})
	roundTrip(t, &EmulatorConfig{Namespaces: []Namespace{{Name: "sbemulatorns"}}, Logging: &Logging{}})
}

func TestMarshalShape(t *testing.T) {
	c := &EmulatorConfig{
		Namespaces: []Namespace{{Name: "sbemulatorns", Queues: []Queue{{Name: "q", Props: QueueProps{
			LockDuration: dur(time.Minute), MaxDeliveryCount: ptr(int32(3)),
		}}}}},
		Logging: &Logging{Type: "File"},
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "q",
            "Properties": {
              "LockDuration": "PT1M",
              "MaxDeliveryCount": 3
            }
          }
        ],
        "Topics": []
      }
    ],
    "Logging": {
      "Type": "File"
    }
  }
}
`
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestMarshalUnrepresentable(t *testing.T) {
	for _, v := range []any{[]int{1}, nil, struct{}{}} {
		c := &EmulatorConfig{Namespaces: []Namespace{{Name: "n", Topics: []Topic{{Name: "t", Subscriptions: []Subscription{{
			Name: "s", Rules: []Rule{{Name: "r", Filter: Filter{Type: FilterCorrelation, Correlation: &CorrelationFilter{
				Properties: map[string]any{"p": v},
			}}}},
		}}}}}}}
		if _, err := c.Marshal(); err == nil {
			t.Errorf("Marshal accepted a %T property", v)
		}
	}
}

// TestFuzzCorpusLoads keeps the checked-in corpus meaningful: the valid
// seeds must load.
func TestFuzzCorpusLoads(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLoad", "valid-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid corpus entries: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := corpusString(t, f, b)
		if _, err := ParseEmulatorConfig([]byte(text), Options{}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
