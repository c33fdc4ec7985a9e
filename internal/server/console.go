package server

import (
	"github.com/busbarmq/busbar/internal/console"
	"github.com/busbarmq/busbar/internal/metrics"
)

// consoleTotals reads each entity's incoming and outgoing message counters
// from the metrics registry, for the console's rates: those of the
// namespace labelled namespace, or with no such label when it is "".
func consoleTotals(m *metrics.Metrics, namespace string) func() map[string]console.Totals {
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
				var entity, ns string
				for _, l := range mt.GetLabel() {
					switch l.GetName() {
					case "entity":
						entity = l.GetValue()
					case "namespace":
						ns = l.GetValue()
					}
				}
				if ns != namespace {
					continue
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
