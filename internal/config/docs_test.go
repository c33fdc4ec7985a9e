package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigurationPageIsComplete fails when docs/configuration.md misses
// a busbar serve setting (its flag or its environment variable) or a
// Config.json key the parser reads, so the reference cannot fall behind
// the code.
func TestConfigurationPageIsComplete(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	for _, s := range ServerSettings() {
		if !strings.Contains(page, "`--"+s.Name) {
			t.Errorf("docs/configuration.md does not describe the flag --%s", s.Name)
		}
		if !strings.Contains(page, s.Env) {
			t.Errorf("docs/configuration.md does not name the environment variable %s (--%s)", s.Env, s.Name)
		}
	}

	_, cfg, ok := strings.Cut(page, "\n## Config.json")
	if !ok {
		t.Fatal("docs/configuration.md has no \"## Config.json\" section")
	}
	for _, keys := range [][]string{
		rootKeys, userConfigKeys, loggingKeys, namespaceKeys, queueKeys, topicKeys, subKeys,
		ruleKeys, rulePropKeys, sqlKeys, corrKeys, queuePropKeys, topicPropKeys, subPropKeys,
	} {
		for _, k := range keys {
			if !strings.Contains(cfg, k) {
				t.Errorf("the Config.json section of docs/configuration.md does not mention %s", k)
			}
		}
	}
}
