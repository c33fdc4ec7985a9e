package faults

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// FuzzSpec: any JSON body of POST /$faults either is refused with a
// validation error or becomes a rule within the bounds.
func FuzzSpec(f *testing.F) {
	f.Add([]byte(`{"kind":"server-busy","entity":"q","count":3,"retryAfter":"1s"}`))
	f.Add([]byte(`{"kind":"drop-frame","entity":"*","op":"management"}`))
	f.Add([]byte(`{"kind":"detach","entity":"t/Subscriptions/s","link":"l","condition":"amqp:link:stolen"}`))
	f.Add([]byte(`{"kind":"delay","entity":"q","delay":250,"ttl":"1h"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var sp Spec
		if json.Unmarshal(body, &sp) != nil {
			return
		}
		s := New(clock.NewFake(t0), nil, nil)
		r, err := s.Add(sp)
		if err != nil {
			if !IsValidation(err) {
				t.Fatalf("not a validation error: %v", err)
			}
			return
		}
		if r.Count < 1 || r.Count > MaxCount || r.TTL <= 0 || time.Duration(r.TTL) > MaxTTL || r.Entity == "" {
			t.Fatalf("out of bounds: %+v", r)
		}
		s.Take(Point{Op: r.Op, Entity: r.Entity, Link: r.Link})
	})
}
