package console

import (
	"net/http"
	"strings"

	"github.com/busbarmq/busbar/internal/history"
)

// historyPage shows the life of a message (GET /$console/history?path=…&seq=…
// or &id=…): the broker's message history, as GET /$history answers it.
func (c *Console) historyPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	entity := q.Get("path")
	if err := covers(s, entity); err != nil {
		return err
	}
	log := c.b.History()
	data := map[string]any{"Entity": entity, "Off": log == nil, "Seq": q.Get("seq"), "ID": q.Get("id")}
	if log != nil {
		var ms []history.Message
		switch id := strings.TrimSpace(q.Get("id")); {
		case id != "":
			if len(id) > 256 {
				return badInput("The message id is longer than 256 bytes.")
			}
			ms = log.ByMessageID(c.b.Now(), entity, id)
		default:
			seq, err := formInt(q.Get("seq"), 0, 0, 1<<62)
			if err != nil {
				return err
			}
			ms = log.BySeq(c.b.Now(), entity, seq)
		}
		data["Messages"] = ms
		data["Mode"] = log.Config().Mode.String()
		data["SampleEvery"] = log.Config().SampleEvery
	}
	c.render(w, r, s, "history", data, false)
	return nil
}

// historyEnabled reports whether the broker keeps message histories (the
// message page links its History view only then).
func (c *Console) historyEnabled() bool { return c.b.History() != nil }
