package names

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		kind Kind
		name string
		want string // "" valid; otherwise text the error must contain
	}{
		{Entity, "orders", ""},
		{Entity, "a", ""},
		{Entity, "Orders.EU-1_x", ""},
		{Entity, "a/b/c", ""},
		{Entity, "a.b/c..d", ""}, // periods inside a segment are fine
		{Entity, "a/.b/c", ""},
		{Entity, long(260), ""},
		{Entity, "x/Rules", ""},
		{Entity, "", "empty"},
		{Entity, long(261), "261 characters long; at most 260"},
		{Entity, "..", "must start and end with a letter or digit"},
		{Entity, ".", "must start and end with a letter or digit"},
		{Entity, "a/../b", `the path segment ".."`},
		{Entity, "sq/../evil2", `the path segment ".."`},
		{Entity, "a/./b", `the path segment "."`},
		{Entity, "a//b", "empty path segment"},
		{Entity, "/a", "must start and end"},
		{Entity, "a/", "must start and end"},
		{Entity, "-a", "must start and end"},
		{Entity, "a_", "must start and end"},
		{Entity, "a b", `contains ' '`},
		{Entity, "a?b", `contains '?'`},
		{Entity, "a\\b", `contains '\\'`},
		{Entity, "a$b", `contains '$'`},
		{Entity, "é", `contains 'é'`},
		{Entity, "a\xffb", "not valid UTF-8"},
		{Entity, "t/Subscriptions/s", `"Subscriptions", which is reserved`},
		{Entity, "t/subscriptions", `"subscriptions", which is reserved`},
		{Subscription, "audit", ""},
		{Subscription, "a.b-c_d", ""},
		{Subscription, long(50), ""},
		{Subscription, long(51), "51 characters long; at most 50"},
		{Subscription, "a/b", `contains '/'`},
		{Subscription, "my sub", `contains ' '`},
		{Subscription, "$Default", `contains '$'`},
		{Subscription, "_a", "must start and end"},
		{Subscription, "", "empty"},
		{Rule, "$Default", ""},
		{Rule, "$default", ""},
		{Rule, "vip", ""},
		{Rule, "$other", `contains '$'`},
		{Rule, long(51), "at most 50"},
		{Rule, "r 1", `contains ' '`},
	} {
		err := Check(tc.kind, tc.name)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%v, %q) = %v, want nil", tc.kind, tc.name, err)
			}
			if err := CheckExisting(tc.kind, tc.name); err != nil {
				t.Errorf("CheckExisting(%v, %q) = %v, want nil", tc.kind, tc.name, err)
			}
			continue
		}
		var ne *Error
		if !errors.As(err, &ne) || ne.Kind != tc.kind || ne.Name != tc.name {
			t.Errorf("Check(%v, %q) = %#v, want an *Error", tc.kind, tc.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.kind.Rule()) {
			t.Errorf("Check(%v, %q) = %q, want it to contain %q and the rule", tc.kind, tc.name, msg, tc.want)
		}
	}
}

// TestCheckExisting: the names an earlier Busbar accepted stay addressable,
// the ones it refused stay refused.
func TestCheckExisting(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		name string
		ok   bool
	}{
		{Entity, "..", true},
		{Entity, "a/../b", true},
		{Entity, "sq/../evil2", true},
		{Entity, "-lead", true},
		{Entity, "a//b", false},
		{Entity, "/a", false},
		{Entity, "a b", false},
		{Entity, "t/Subscriptions/s", false},
		{Entity, strings.Repeat("a", 261), false},
		{Subscription, "my sub", true},
		{Subscription, "ünïcode", true},
		{Subscription, "$x", false},
		{Subscription, "a/b", false},
		{Subscription, "a\tb", false},
		{Subscription, strings.Repeat("é", 50), true},
		{Subscription, strings.Repeat("é", 51), false},
		{Rule, "$custom", true},
		{Rule, "r 1", true},
		{Rule, "r#1", false},
		{Rule, "", false},
	} {
		if err := CheckExisting(tc.kind, tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckExisting(%v, %q) = %v, want ok=%v", tc.kind, tc.name, err, tc.ok)
		}
	}
}

func TestErrorTruncatesLongNames(t *testing.T) {
	name := strings.Repeat("x", 10000) + " "
	msg := Check(Entity, name).Error()
	if len(msg) > 1000 || !strings.Contains(msg, "…") {
		t.Errorf("message is %d bytes: %.200q", len(msg), msg)
	}
}

// FuzzCheck: neither check panics; a name the rule accepts is accepted as
// an existing name too, is a clean path (no URL or path library turns it
// into another name), is ASCII within its length limit, and the rule does
// not depend on case.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"orders", "a/b", "a/../b", "..", "$Default", "my sub", "t/Subscriptions/s", "a//b", "-a", "é"} {
		f.Add(uint8(Entity), s)
	}
	f.Fuzz(func(t *testing.T, kind uint8, name string) {
		k := Kind(kind%3 + 1)
		err := Check(k, name)
		existing := CheckExisting(k, name)
		if err == nil && existing != nil {
			t.Fatalf("Check(%v, %q) ok but CheckExisting = %v", k, name, existing)
		}
		if err != nil {
			_ = err.Error()
		}
		if existing != nil {
			_ = existing.Error()
		}
		if (Check(k, strings.ToUpper(name)) == nil) != (err == nil) && isASCII(name) {
			t.Fatalf("Check(%v, %q) = %v but its upper case gives the other answer", k, name, err)
		}
		if err != nil {
			return
		}
		limit := MaxEntityLength
		if k != Entity {
			limit = MaxSubscriptionLength
		}
		if len(name) == 0 || len(name) > limit || !isASCII(name) {
			t.Fatalf("Check(%v, %q) accepted a name of %d bytes", k, name, len(name))
		}
		if k == Entity && path.Clean(name) != name {
			t.Fatalf("Check accepted %q, which path.Clean turns into %q", name, path.Clean(name))
		}
		if k != Entity && strings.Contains(name, "/") {
			t.Fatalf("Check(%v) accepted %q with a '/'", k, name)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
