package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/config"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns. Cells must not contain tabs or newlines;
// use cell() for arbitrary text.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cell makes text safe for one table cell: control characters escaped, at
// most max runes (0 for no limit), "-" when empty.
func cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	truncate := max > 0 && utf8.RuneCountInString(s) > max
	n := 0
	for _, r := range s {
		if truncate && n == max-1 {
			b.WriteString("…")
			break
		}
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		n++
	}
	return b.String()
}

// bodyCell shows a message body in a table: text as text, anything else as
// a byte count.
func bodyCell(body []byte, max int) string {
	if len(body) == 0 {
		return "-"
	}
	if !isText(body) {
		return fmt.Sprintf("(%d bytes of binary)", len(body))
	}
	return cell(string(body), max)
}

func optStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func optInt[T int32 | int64](p *T) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(int64(*p), 10)
}

func optBool(p *bool) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatBool(*p)
}

func timeCell(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// humanDuration writes d compactly: 30s, 1m, 1h30m, 14d, 500ms, never.
func humanDuration(d time.Duration) string {
	if d >= config.MaxDuration {
		return "never"
	}
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d
	}
	units := []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "µs"}, {1, "ns"}}
	for _, u := range units {
		if d >= u.d {
			fmt.Fprintf(&b, "%d%s", d/u.d, u.s)
			d %= u.d
		}
	}
	return b.String()
}

// isoCell shows an ISO 8601 duration from the management API as
// humanDuration does.
func isoCell(p *string) string {
	if p == nil {
		return "-"
	}
	d, err := config.ParseISO8601(*p)
	if err != nil {
		return *p
	}
	return humanDuration(d)
}

// isTerminal reports whether f is a terminal: a character device other
// than the null device. (The module has no isatty; this is close enough
// for deciding whether to draw a progress line.)
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	fi, err := file.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// progress is a one-line progress report on a terminal, redrawn at most
// ten times a second. It does nothing when w is not a terminal.
type progress struct {
	w       io.Writer
	on      bool
	verb    string
	total   int
	last    time.Time
	printed bool
}

func newProgress(w io.Writer, verb string, total int) *progress {
	return &progress{w: w, on: isTerminal(w), verb: verb, total: total}
}

func (p *progress) update(n int) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.printed = true
	if p.total > 0 {
		fmt.Fprintf(p.w, "\r%s %d/%d (%d%%)\x1b[K", p.verb, n, p.total, n*100/p.total)
	} else {
		fmt.Fprintf(p.w, "\r%s %d\x1b[K", p.verb, n)
	}
}

// done erases the progress line.
func (p *progress) done() {
	if p.printed {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.printed = false
	}
}

// plural is "1 message", "2 messages".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
