package cli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/config"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s":                        30 * time.Second,
		"1h30m":                      90 * time.Minute,
		"7d":                         7 * 24 * time.Hour,
		"1d12h":                      36 * time.Hour,
		"PT1M":                       time.Minute,
		"P14D":                       14 * 24 * time.Hour,
		"never":                      config.MaxDuration,
		"P10675199DT2H48M5.4775807S": config.MaxDuration,
	} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "1x", "d", "7dd", "P"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) succeeded", in)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                      "0s",
		30 * time.Second:       "30s",
		time.Minute:            "1m",
		90 * time.Minute:       "1h30m",
		14 * 24 * time.Hour:    "14d",
		500 * time.Millisecond: "500ms",
		config.MaxDuration:     "never",
		-2 * time.Second:       "-2s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
		if d > 0 && d < config.MaxDuration {
			back, err := parseDuration(humanDuration(d))
			if err != nil || back != d {
				t.Errorf("parseDuration(humanDuration(%v)) = %v, %v", d, back, err)
			}
		}
	}
}

func TestParseProperty(t *testing.T) {
	when := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string][2]any{
		"n=5":                         {"n", int64(5)},
		"n=-5":                        {"n", int64(-5)},
		"b=true":                      {"b", true},
		"b=false":                     {"b", false},
		"b=True":                      {"b", "True"},
		"s=hello":                     {"s", "hello"},
		"f=1.5":                       {"f", "1.5"},
		"zip=007":                     {"zip", int64(7)},
		"zip:string=007":              {"zip", "007"},
		"f:double=1.5":                {"f", 1.5},
		"i:int32=7":                   {"i", int32(7)},
		"l:long=7":                    {"l", int64(7)},
		"ok:bool=1":                   {"ok", true},
		"t:time=2030-01-02T03:04:05Z": {"t", when},
		"url=a=b":                     {"url", "a=b"},
		"a:b=c":                       {"a:b", "c"},
		"empty=":                      {"empty", ""},
	} {
		k, v, err := parseProperty(in)
		if err != nil || k != want[0] || !reflect.DeepEqual(v, want[1]) {
			t.Errorf("parseProperty(%q) = %q, %#v, %v; want %q, %#v", in, k, v, err, want[0], want[1])
		}
	}
	for _, in := range []string{"novalue", "=v", "n:int=x", "i:int32=9999999999", "t:time=yesterday"} {
		if _, _, err := parseProperty(in); err == nil {
			t.Errorf("parseProperty(%q) succeeded", in)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                       now.Add(10 * time.Minute),
		"2030-01-02T15:04:05Z":      time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC),
		"2030-01-02T15:04:05+02:00": time.Date(2030, 1, 2, 13, 4, 5, 0, time.UTC),
	} {
		got, err := parseSchedule(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSchedule(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseSchedule("never", now); err == nil {
		t.Error("parseSchedule(never) succeeded")
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"":            "-",
		"plain":       "plain",
		"tab\there":   `tab\there`,
		"0123456789A": "0123456…",
	} {
		if got := cell(in, 8); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProgress(t *testing.T) {
	var buf strings.Builder
	p := newProgress(&buf, "sending", 10)
	p.update(5)
	p.done()
	if buf.Len() != 0 {
		t.Errorf("progress drew on a non-terminal: %q", buf.String())
	}
	p = &progress{w: &buf, on: true, verb: "sending", total: 10}
	p.update(5)
	p.update(6) // within 100 ms: not drawn
	p.done()
	if got := buf.String(); got != "\rsending 5/10 (50%)\x1b[K\r\x1b[K" {
		t.Errorf("progress drew %q", got)
	}
}
