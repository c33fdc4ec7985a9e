package config

import (
	"os"
	"testing"
)

// FuzzARMTemplate: reading an ARM template (its JSON, expressions and
// resources) never panics, and whatever it accepts is a valid
// configuration. The corpus is in testdata/fuzz/FuzzARMTemplate.
func FuzzARMTemplate(f *testing.F) {
	for _, name := range []string{"exported.json", "handwritten.json", "unsupported.json"} {
		b, err := os.ReadFile("testdata/arm/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`{"resources":[{"type":"Microsoft.ServiceBus/namespaces/queues","name":"[format('{0}/{1}', 'n', toLower('Q'))]"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		imp, err := ParseARMTemplate([]byte(s), ARMOptions{Parameters: map[string]any{"serviceBusNamespaceName": "n"}})
		if err != nil {
			return
		}
		if err := imp.Config.Validate(Options{}); err != nil {
			t.Fatalf("accepted an invalid configuration: %v", err)
		}
	})
}
