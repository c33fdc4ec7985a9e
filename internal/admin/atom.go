package admin

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/busbarmq/busbar/internal/config"
)

// XML namespaces of the management API (§1.6).
const (
	nsAtom       = "http://www.w3.org/2005/Atom"
	nsServiceBus = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
	nsXSI        = "http://www.w3.org/2001/XMLSchema-instance"
	// nsCounts holds CountDetails' children, written under the prefix
	// d2p1 as the service does (the JS client looks them up as
	// "<prefix>:Name" and wants exactly one xmlns attribute, §1.11).
	nsCounts = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
)

// Response content types.
const (
	contentTypeEntry = "application/atom+xml;type=entry;charset=utf-8"
	contentTypeFeed  = "application/atom+xml;type=feed;charset=utf-8"
	contentTypeError = "application/xml; charset=utf-8"
)

// timeLayout is RFC 3339 with up to 7 fractional digits (.NET's ticks), as
// the service writes timestamps. The zero time comes out as
// 0001-01-01T00:00:00Z, the service's "never accessed" (§1.9).
const timeLayout = "2006-01-02T15:04:05.9999999Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// xmlWriter writes XML by hand so that element order and prefixes are
// exactly the service's. It escapes only &, < and > in text (and " in
// attributes): numeric character references such as &#39; reach JS
// callers undecoded (§1.7), which rules out xml.EscapeText.
type xmlWriter struct {
	buf []byte
}

// open writes a start tag; attrs are name, value pairs.
func (w *xmlWriter) open(name string, attrs ...string) {
	w.startTag(name, attrs)
	w.buf = append(w.buf, '>')
}

// empty writes a self-closing element; attrs are name, value pairs.
func (w *xmlWriter) empty(name string, attrs ...string) {
	w.startTag(name, attrs)
	w.buf = append(w.buf, "/>"...)
}

func (w *xmlWriter) startTag(name string, attrs []string) {
	w.buf = append(w.buf, '<')
	w.buf = append(w.buf, name...)
	for i := 0; i+1 < len(attrs); i += 2 {
		w.buf = append(w.buf, ' ')
		w.buf = append(w.buf, attrs[i]...)
		w.buf = append(w.buf, `="`...)
		w.buf = appendEscaped(w.buf, attrs[i+1], true)
		w.buf = append(w.buf, '"')
	}
}

// close writes an end tag.
func (w *xmlWriter) close(name string) {
	w.buf = append(w.buf, "</"...)
	w.buf = append(w.buf, name...)
	w.buf = append(w.buf, '>')
}

// text writes <name>value</name>.
func (w *xmlWriter) text(name, value string) {
	w.open(name)
	w.buf = appendEscaped(w.buf, value, false)
	w.close(name)
}

// optText writes <name>value</name> unless value is empty: unset optional
// strings are omitted, never sent empty (§1.9).
func (w *xmlWriter) optText(name, value string) {
	if value != "" {
		w.text(name, value)
	}
}

func (w *xmlWriter) bool(name string, v bool) { w.text(name, strconv.FormatBool(v)) }

func (w *xmlWriter) int(name string, v int64) { w.text(name, strconv.FormatInt(v, 10)) }

// duration writes an ISO 8601 duration; broker.Infinite comes out as the
// service's "never", P10675199DT2H48M5.4775807S.
func (w *xmlWriter) duration(name string, d time.Duration) {
	w.text(name, config.FormatISO8601(d))
}

func (w *xmlWriter) time(name string, t time.Time) { w.text(name, formatTime(t)) }

func (w *xmlWriter) bytes() []byte { return w.buf }

// appendEscaped appends s as XML text or attribute content. Characters XML
// 1.0 cannot carry (control characters, invalid UTF-8, which could only
// come from a request path echoed into an error) become U+FFFD.
func appendEscaped(b []byte, s string, attr bool) []byte {
	for _, r := range s {
		switch {
		case r == '&':
			b = append(b, "&amp;"...)
		case r == '<':
			b = append(b, "&lt;"...)
		case r == '>':
			b = append(b, "&gt;"...)
		case r == '"' && attr:
			b = append(b, "&quot;"...)
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r == utf8.RuneError, r == 0xFFFE, r == 0xFFFF:
			b = utf8.AppendRune(b, utf8.RuneError)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return b
}

// entryMeta is what an Atom entry's envelope says about its content (§1.6).
type entryMeta struct {
	// id is the entity's absolute URL with ?api-version; the self link
	// repeats it. JS takes names from its path, so it has no prefix
	// before the entity name and capitalised path words.
	id string
	// title is the entity name (Go and .NET take names from here).
	title     string
	published time.Time
	updated   time.Time
	// author is the namespace name; empty omits <author> (subscription
	// and rule entries have none).
	author string
}

// writeEntry writes an <entry>; content writes the description element
// inside <content type="application/xml">. A top-level entry declares the
// Atom namespace; one inside a feed inherits it.
func writeEntry(w *xmlWriter, topLevel bool, m entryMeta, content func(*xmlWriter)) {
	if topLevel {
		w.open("entry", "xmlns", nsAtom)
	} else {
		w.open("entry")
	}
	w.text("id", m.id)
	w.open("title", "type", "text")
	w.buf = appendEscaped(w.buf, m.title, false)
	w.close("title")
	w.time("published", m.published)
	w.time("updated", m.updated)
	if m.author != "" {
		w.open("author")
		w.text("name", m.author)
		w.close("author")
	}
	w.empty("link", "rel", "self", "href", m.id)
	w.open("content", "type", "application/xml")
	content(w)
	w.close("content")
	w.close("entry")
}

// feedMeta is a feed's envelope.
type feedMeta struct {
	title   string // "Queues", "Topics", "Subscriptions", "Rules"
	self    string // the request's URL; also the feed's id
	next    string // URL of the next page; empty when no entries remain
	updated time.Time
}

// writeFeed writes a <feed> whose entries writes the <entry> elements.
// rel="self" and rel="next" are written together while entries remain:
// the JS client only finds links when there are two or more (§1.3).
func writeFeed(w *xmlWriter, m feedMeta, entries func(*xmlWriter)) {
	w.open("feed", "xmlns", nsAtom)
	w.open("title", "type", "text")
	w.buf = appendEscaped(w.buf, m.title, false)
	w.close("title")
	w.text("id", m.self)
	w.time("updated", m.updated)
	w.empty("link", "rel", "self", "href", m.self)
	if m.next != "" {
		w.empty("link", "rel", "next", "href", m.next)
	}
	entries(w)
	w.close("feed")
}
