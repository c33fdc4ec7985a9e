package console

import (
	"sync"
	"time"
)

// Totals are an entity's message counters since the broker started:
// messages accepted by sends (In) and handed to receivers (Out).
type Totals struct{ In, Out float64 }

// Rate is an entity's messages per second in and out.
type Rate struct{ In, Out float64 }

// minRateInterval is the shortest interval a rate is measured over:
// overview loads closer together reuse the last rates.
const minRateInterval = 2 * time.Second

// rates turns counter samples, taken when the overview is shown, into
// rates over the interval since the previous sample.
type rates struct {
	mu    sync.Mutex
	at    time.Time
	last  map[string]Totals
	rates map[string]Rate
}

// sample records totals taken at now and returns the rates (nil until a
// second sample at least minRateInterval later).
func (r *rates) sample(now time.Time, totals map[string]Totals) map[string]Rate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.at, r.last = now, totals
		return nil
	}
	d := now.Sub(r.at)
	if d < minRateInterval {
		return r.rates
	}
	out := make(map[string]Rate, len(totals))
	for k, t := range totals {
		p := r.last[k]
		out[k] = Rate{In: max(0, t.In-p.In) / d.Seconds(), Out: max(0, t.Out-p.Out) / d.Seconds()}
	}
	r.at, r.last, r.rates = now, totals, out
	return out
}
