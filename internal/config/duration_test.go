package config

import (
	"math"
	"testing"
	"time"
)

func TestParseISO8601(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"PT1M", time.Minute},
		{"PT1H", time.Hour},
		{"PT20S", 20 * time.Second},
		{"PT10M", 10 * time.Minute},
		{"P14D", 14 * day},
		{"P1D", day},
		{"PT0S", 0},
		{"P0D", 0},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT0,5S", 500 * time.Millisecond},
		{"PT1.000000001S", time.Second + 1},
		{"PT1.0000000019S", time.Second + 1}, // beyond nanoseconds: truncated
		{"PT5.4775807S", 5*time.Second + 477580700},
		{"P1DT2H3M4S", day + 2*time.Hour + 3*time.Minute + 4*time.Second},
		{"PT90M", 90 * time.Minute},
		{"PT3600S", time.Hour},
		{"P1Y", 365 * day},
		{"P1M", 30 * day},
		{"P2W", 14 * day},
		{"P1Y2M3DT4H", (365+60+3)*day + 4*time.Hour},
		{"pt1m", time.Minute},
		{" PT1M ", time.Minute},
		{"-PT1M", -time.Minute},
		{"P106751DT23H47M16.854775807S", MaxDuration},
		{NeverISO8601, MaxDuration},
		{"P10675199DT2H48M5.4775807S", MaxDuration},
		{"P99999999999999999999999D", MaxDuration},
		{"PT99999999999999999999S", MaxDuration},
		{"P300Y", MaxDuration},
		{"-P10675199D", math.MinInt64},
		{"-P106751DT23H47M16.854775808S", math.MinInt64},
	} {
		got, err := ParseISO8601(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseISO8601(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseISO8601Invalid(t *testing.T) {
	for _, in := range []string{
		"", "P", "PT", "1H", "T1H", "PT1", "P1H", "PT1D", "PT1Y", "P1S",
		"PT1M1H",   // out of order
		"P1D1Y",    // out of order
		"PT1H1H",   // repeated
		"P1DT",     // T without a component
		"PT1.5M",   // fraction on minutes
		"P1.5D",    // fraction on days
		"PT.5S",    // no integer part
		"PT1.S",    // no fraction digits
		"PT-1S",    // sign inside
		"--PT1S",   // double sign
		"P1DTT1H",  // double T
		"PT1H ago", // trailing text
		"PT1HX",
		"+PT1S",
		"1 minute",
	} {
		if d, err := ParseISO8601(in); err == nil {
			t.Errorf("ParseISO8601(%q) = %v, want an error", in, d)
		}
	}
}

func TestFormatISO8601(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "PT0S"},
		{time.Minute, "PT1M"},
		{10 * time.Minute, "PT10M"},
		{time.Hour, "PT1H"},
		{14 * day, "P14D"},
		{day, "P1D"},
		{20 * time.Second, "PT20S"},
		{90 * time.Minute, "PT1H30M"},
		{day + time.Second, "P1DT1S"},
		{500 * time.Millisecond, "PT0.5S"},
		{5*time.Second + 477580700, "PT5.4775807S"},
		{1, "PT0.000000001S"},
		{365 * day, "P365D"},
		{-time.Minute, "-PT1M"},
		{MaxDuration, NeverISO8601},
		{MaxDuration - 1, "P106751DT23H47M16.854775806S"},
		{math.MinInt64, "-P106751DT23H47M16.854775808S"},
	} {
		if got := FormatISO8601(tc.in); got != tc.want {
			t.Errorf("FormatISO8601(%d) = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
}

func TestISO8601RoundTrip(t *testing.T) {
	for _, d := range []time.Duration{
		0, 1, time.Millisecond, 999999999, time.Second, 59 * time.Second, time.Hour - 1,
		day - 1, 7 * day, 106751 * day, MaxDuration, MaxDuration - 1, -1,
		-day, math.MinInt64, math.MinInt64 + 1,
	} {
		s := FormatISO8601(d)
		got, err := ParseISO8601(s)
		if err != nil || got != d {
			t.Errorf("ParseISO8601(FormatISO8601(%d) = %q) = %d, %v", int64(d), s, int64(got), err)
		}
	}
}

func FuzzISO8601(f *testing.F) {
	for _, s := range []string{"PT1M", "P10675199DT2H48M5.4775807S", "PT0.5S", "-P1Y2M3W4DT5H6M7.8S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseISO8601(s)
		if err != nil {
			return
		}
		out := FormatISO8601(d)
		back, err := ParseISO8601(out)
		if err != nil || back != d {
			t.Fatalf("%q → %d → %q → %d, %v", s, int64(d), out, int64(back), err)
		}
	})
}
