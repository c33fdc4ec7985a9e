package server

import (
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/metrics"
)

// consoleTotals reads each entity's incoming and outgoing message counters
// from the metrics registry, for the console's rates.
func consoleTotals(m *metrics.Metrics) func() map[string]console.Totals {
	return func() map[string]console.Totals {
		fams, err := m.Registry().Gather()
		if err != nil {
			return nil
		}
		out := map[string]console.Totals{}
		for _, f := range fams {
			in := f.GetName() == "busbar_incoming_messages_total"
			if !in && f.GetName() != "busbar_outgoing_messages_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				var entity string
				for _, l := range mt.GetLabel() {
					if l.GetName() == "entity" {
						entity = l.GetValue()
					}
				}
				t := out[entity]
				if in {
					t.In = mt.GetCounter().GetValue()
				} else {
					t.Out = mt.GetCounter().GetValue()
				}
				out[entity] = t
			}
		}
		return out
	}
}
