package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/faults"
)

// The testing tools: the Time page (a broker started with --test-clock:
// show the test time, advance it, set it) and the Faults page (a broker
// started with --faults: list, add and clear fault rules). Both need the
// Manage right, as their admin API endpoints (/$time, /$faults) do, and
// are not routed at all when their tool is off (Options.TestClock or
// Options.Faults nil). Moves and rules go through the same calls as the
// admin API: clock.Test's Advance and Set, faults.Set's Add (which
// completes and validates a faults.Spec) and Clear.

func (c *Console) timePage(w http.ResponseWriter, r *http.Request, s *session) error {
	now := c.testClock.Now()
	c.render(w, r, s, "time", map[string]any{"Now": now.UTC().Format(time.RFC3339Nano), "Offset": c.testClock.Offset().String(),
		"SetTo": now.UTC().Add(time.Hour).Truncate(time.Second).Format(time.RFC3339)}, false)
	return nil
}

func (c *Console) timeAdvance(w http.ResponseWriter, r *http.Request, s *session) error {
	by := strings.TrimSpace(r.PostForm.Get("by"))
	if by == "" {
		return badInput("Enter a duration to advance by, such as 90s, 10m or 2h.")
	}
	d, err := time.ParseDuration(by)
	if err != nil {
		return badInput("%q is not a duration such as 90s, 10m or 2h.", by)
	}
	now, err := c.testClock.Advance(d)
	return c.timeMoved(w, r, s, now, err)
}

func (c *Console) timeSet(w http.ResponseWriter, r *http.Request, s *session) error {
	to := strings.TrimSpace(r.PostForm.Get("to"))
	if to == "" {
		return badInput("Enter a time to set, such as 2030-01-01T00:00:00Z.")
	}
	t, err := time.Parse(time.RFC3339Nano, to)
	if err != nil {
		return badInput("%q is not an RFC 3339 time such as 2030-01-01T00:00:00Z.", to)
	}
	now, err := c.testClock.Set(t)
	return c.timeMoved(w, r, s, now, err)
}

func (c *Console) timeMoved(w http.ResponseWriter, r *http.Request, s *session, now time.Time, err error) error {
	if err != nil {
		if errors.Is(err, clock.ErrBackwards) || errors.Is(err, clock.ErrTooFar) {
			return badInput("The test clock was not moved: %v.", err)
		}
		if errors.Is(err, clock.ErrNotSaved) {
			return &userError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("The test clock was not moved: %v.", err)}
		}
		return err
	}
	c.log.Warn("test clock moved", "keyName", s.grant.KeyName, "now", now.UTC().Format(time.RFC3339Nano), "offset", c.testClock.Offset().String())
	c.redirect(w, r, s, c.prefix+"time", "The test clock now reads "+now.UTC().Format(time.RFC3339Nano)+".")
	return nil
}

func (c *Console) faultsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	c.render(w, r, s, "faults", map[string]any{"Rules": c.faults.List(), "Injected": c.faults.Injected(), "Kinds": faults.Kinds()}, false)
	return nil
}

// faultAdd builds a faults.Spec from the form and adds it with
// faults.Set.Add, the admin API's constructor and validation.
func (c *Console) faultAdd(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostForm
	sp := faults.Spec{Kind: faults.Kind(strings.TrimSpace(f.Get("kind"))), Entity: strings.TrimSpace(f.Get("entity")),
		Op: faults.Op(strings.TrimSpace(f.Get("op"))), Link: strings.TrimSpace(f.Get("link")), Property: strings.TrimSpace(f.Get("property")),
		Condition: strings.TrimSpace(f.Get("condition")), Description: strings.TrimSpace(f.Get("description"))}
	var err error
	if sp.Count, err = formCount(f.Get("count"), "count"); err != nil {
		return err
	}
	if sp.Skip, err = formCount(f.Get("skip"), "skip"); err != nil {
		return err
	}
	for _, d := range []struct {
		field string
		to    *faults.Duration
	}{{"delay", &sp.Delay}, {"retryAfter", &sp.RetryAfter}, {"ttl", &sp.TTL}} {
		v := strings.TrimSpace(f.Get(d.field))
		if v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil {
			return badInput("%s: %q is not a duration such as 500ms, 2s or 10m.", d.field, v)
		}
		*d.to = faults.Duration(x)
	}
	rule, err := c.faults.Add(sp)
	if err != nil {
		if faults.IsValidation(err) {
			return badInput("Invalid fault rule: %v.", err)
		}
		return err
	}
	c.log.Warn("fault rule added", "keyName", s.grant.KeyName, "id", rule.ID, "kind", string(rule.Kind), "entity", rule.Entity)
	c.redirect(w, r, s, c.prefix+"faults", "Added fault rule "+rule.ID+".")
	return nil
}

func formCount(v, field string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, badInput("%s: %q is not a whole number.", field, v)
	}
	return n, nil
}

// faultClear clears the rule named by the form's "id", or every rule
// with "all" set.
func (c *Console) faultClear(w http.ResponseWriter, r *http.Request, s *session) error {
	id := strings.TrimSpace(r.PostForm.Get("id"))
	if id == "" && r.PostForm.Get("all") != "1" {
		return badInput("Name the fault rule to clear, or clear them all.")
	}
	n := c.faults.Clear(id)
	if id != "" && n == 0 {
		return &userError{status: http.StatusNotFound, msg: "There is no fault rule '" + id + "' (it may have fired its last fault or expired)."}
	}
	c.log.Warn("fault rules cleared", "keyName", s.grant.KeyName, "id", id, "cleared", n)
	c.redirect(w, r, s, c.prefix+"faults", "Cleared "+strconv.Itoa(n)+" fault rule(s).")
	return nil
}
