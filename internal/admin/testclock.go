package admin

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// Time control: Busbar's own endpoints for a broker started with
// --test-clock, under a '$' name no entity can have, with JSON bodies,
// the API's authorisation (Manage) and its <Error> answers:
//
//	/$time          GET   {"now": RFC 3339, "offset": "2h0m0s"}
//	/$time/advance  POST  {"by": "10m"} (a Go duration, ≥ 0) → {"now", "offset"}
//	/$time/set      POST  {"to": RFC 3339} (not before "now") → {"now", "offset"}
//
// "offset" is how far the test clock is ahead of the wall clock. The
// clock never goes back, as in Azure: a negative "by" or a "to" before
// the current test time is refused with 400, and so is a move more than
// clock.MaxOffset ahead of the wall clock. Every endpoint answers 404
// unless the broker was started with --test-clock.

// timeState is the answer of every /$time endpoint.
type timeState struct {
	Now    string `json:"now"`
	Offset string `json:"offset"`
}

func (h *Handler) timeControl() (*clock.Test, error) {
	if h.testClock == nil {
		return nil, errorf(http.StatusNotFound, "The test clock is off: start the broker with --test-clock (BUSBAR_TEST_CLOCK=true) to use /$time.")
	}
	return h.testClock, nil
}

func timeReply(c *clock.Test, now time.Time) (*reply, error) {
	return jsonReply(http.StatusOK, timeState{Now: now.UTC().Format(time.RFC3339Nano), Offset: c.Offset().String()})
}

func getTime(h *Handler, _ *request) (*reply, error) {
	c, err := h.timeControl()
	if err != nil {
		return nil, err
	}
	return timeReply(c, c.Now())
}

func advanceTime(h *Handler, rq *request) (*reply, error) {
	c, err := h.timeControl()
	if err != nil {
		return nil, err
	}
	var body struct {
		By string `json:"by"`
	}
	if err := readJSON(rq.r, &body); err != nil {
		return nil, err
	}
	if strings.TrimSpace(body.By) == "" {
		return nil, badRequest(`The request body names no duration: send {"by": "10m"}.`)
	}
	d, err := time.ParseDuration(strings.TrimSpace(body.By))
	if err != nil {
		return nil, badRequest(`"by" is not a duration such as "90s", "10m" or "2h": %q.`, body.By)
	}
	now, err := c.Advance(d)
	if err != nil {
		return nil, timeMoveError(err)
	}
	h.logTimeMove(now, c)
	return timeReply(c, now)
}

func setTime(h *Handler, rq *request) (*reply, error) {
	c, err := h.timeControl()
	if err != nil {
		return nil, err
	}
	var body struct {
		To string `json:"to"`
	}
	if err := readJSON(rq.r, &body); err != nil {
		return nil, err
	}
	if strings.TrimSpace(body.To) == "" {
		return nil, badRequest(`The request body names no time: send {"to": "2030-01-01T00:00:00Z"}.`)
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(body.To))
	if err != nil {
		return nil, badRequest(`"to" is not an RFC 3339 time such as "2030-01-01T00:00:00Z": %q.`, body.To)
	}
	now, err := c.Set(t)
	if err != nil {
		return nil, timeMoveError(err)
	}
	h.logTimeMove(now, c)
	return timeReply(c, now)
}

// timeMoveError is the 400 for a move the test clock refused.
func timeMoveError(err error) error {
	if errors.Is(err, clock.ErrBackwards) || errors.Is(err, clock.ErrTooFar) {
		return badRequest("The test clock was not moved: %v.", err)
	}
	if errors.Is(err, clock.ErrNotSaved) {
		// The data directory could not take the new offset.
		return errorf(http.StatusServiceUnavailable, "The test clock was not moved: %v.", err)
	}
	return err
}

func (h *Handler) logTimeMove(now time.Time, c *clock.Test) {
	if h.log != nil {
		h.log.Warn("test clock moved", "now", now.UTC().Format(time.RFC3339Nano), "offset", c.Offset().String())
	}
}
