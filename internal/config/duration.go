package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxDuration is the largest time.Duration. Service Bus' "never"
// (TimeSpan.MaxValue, P10675199DT2H48M5.4775807S) is longer than any
// time.Duration, so it, and every longer value, parses to MaxDuration, and
// MaxDuration formats back as NeverISO8601.
const MaxDuration = time.Duration(math.MaxInt64)

// NeverISO8601 is how Service Bus writes its "never" duration
// (TimeSpan.MaxValue), the default DefaultMessageTimeToLive and
// AutoDeleteOnIdle.
const NeverISO8601 = "P10675199DT2H48M5.4775807S"

const day = 24 * time.Hour

var errDuration = errors.New("not an ISO 8601 duration")

// ParseISO8601 parses an ISO 8601 duration as Service Bus writes them:
// [-]P[nY][nM][nW][nD][T[nH][nM][n[.f]S]], e.g. PT1M, P14D, PT0.5S,
// P10675199DT2H48M5.4775807S. At least one component is required, and a T
// must be followed by one. Only seconds may have a fraction; digits beyond
// nanoseconds are dropped. In the date part a year is 365 days, a month 30
// days and a week 7 days, as .NET's XmlConvert counts them. Letters may be in
// either case and surrounding white space is ignored.
//
// The result saturates: a value beyond time.Duration's range (about 292
// years) is MaxDuration (or math.MinInt64 when negative).
func ParseISO8601(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	neg := false
	if strings.HasPrefix(t, "-") {
		neg, t = true, t[1:]
	}
	if t == "" || (t[0] != 'P' && t[0] != 'p') {
		return 0, errDuration
	}
	t = t[1:]
	var total uint64 // nanoseconds, saturated at math.MaxInt64+1
	add := func(n uint64, unit time.Duration) {
		const limit = 1 << 63
		u := uint64(unit)
		if n > limit/u || n*u > limit-total {
			total = limit
			return
		}
		total += n * u
	}
	// Designators allowed in each part, in the order they must appear.
	dateUnits := []struct {
		c    byte
		unit time.Duration
	}{{'Y', 365 * day}, {'M', 30 * day}, {'W', 7 * day}, {'D', day}}
	timeUnits := []struct {
		c    byte
		unit time.Duration
	}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}}

	components := 0
	inTime := false
	next := 0 // index of the next allowed designator in the current part
	for t != "" {
		if t[0] == 'T' || t[0] == 't' {
			if inTime {
				return 0, errDuration
			}
			inTime, next, t = true, 0, t[1:]
			if t == "" {
				return 0, errDuration // a T must be followed by a component
			}
			continue
		}
		i := 0
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, errDuration
		}
		n := parseDigits(t[:i])
		var frac uint64 // nanoseconds
		hasFrac := false
		if i < len(t) && (t[i] == '.' || t[i] == ',') {
			j := i + 1
			for j < len(t) && t[j] >= '0' && t[j] <= '9' {
				j++
			}
			if j == i+1 {
				return 0, errDuration
			}
			digits := t[i+1 : j]
			if len(digits) > 9 {
				digits = digits[:9]
			}
			frac = parseDigits(digits)
			for k := len(digits); k < 9; k++ {
				frac *= 10
			}
			hasFrac = true
			i = j
		}
		if i == len(t) {
			return 0, errDuration // a number without a designator
		}
		c := t[i] &^ 0x20 // upper case
		found := false
		if !inTime {
			for k := next; k < len(dateUnits); k++ {
				if dateUnits[k].c == c {
					add(n, dateUnits[k].unit)
					next, found = k+1, true
					break
				}
			}
		} else {
			for k := next; k < len(timeUnits); k++ {
				if timeUnits[k].c == c {
					add(n, timeUnits[k].unit)
					next, found = k+1, true
					break
				}
			}
		}
		if !found || (hasFrac && (!inTime || c != 'S')) {
			return 0, errDuration
		}
		add(frac, 1)
		components++
		t = t[i+1:]
	}
	if components == 0 {
		return 0, errDuration
	}
	if neg {
		if total >= 1<<63 {
			return math.MinInt64, nil
		}
		return -time.Duration(total), nil
	}
	if total > math.MaxInt64 {
		return MaxDuration, nil
	}
	return time.Duration(total), nil
}

// parseDigits parses a run of ASCII digits, saturating at math.MaxUint64.
func parseDigits(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return math.MaxUint64 // only a range error is possible here
	}
	return n
}

// FormatISO8601 writes d the way Service Bus does: days, then a T and
// hours, minutes and seconds, leaving out zero components and never using
// years, months or weeks: PT1M, P14D, PT10M, P1DT1H30M, PT0.5S, PT0S for
// zero. The fraction of a second keeps up to nine digits, without trailing
// zeros. MaxDuration is written NeverISO8601. ParseISO8601 reads every result
// back to the same value.
func FormatISO8601(d time.Duration) string {
	if d == MaxDuration {
		return NeverISO8601
	}
	var b []byte
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u // two's complement: correct for math.MinInt64 too
	}
	b = append(b, 'P')
	days := u / uint64(day)
	u %= uint64(day)
	h := u / uint64(time.Hour)
	u %= uint64(time.Hour)
	m := u / uint64(time.Minute)
	u %= uint64(time.Minute)
	s := u / uint64(time.Second)
	ns := u % uint64(time.Second)
	if days > 0 {
		b = strconv.AppendUint(b, days, 10)
		b = append(b, 'D')
	}
	if h == 0 && m == 0 && s == 0 && ns == 0 {
		if days == 0 {
			b = append(b, "T0S"...)
		}
		return string(b)
	}
	b = append(b, 'T')
	if h > 0 {
		b = strconv.AppendUint(b, h, 10)
		b = append(b, 'H')
	}
	if m > 0 {
		b = strconv.AppendUint(b, m, 10)
		b = append(b, 'M')
	}
	if s > 0 || ns > 0 {
		b = strconv.AppendUint(b, s, 10)
		if ns > 0 {
			f := strconv.AppendUint(nil, ns+uint64(time.Second), 10)[1:] // nine digits
			for f[len(f)-1] == '0' {
				f = f[:len(f)-1]
			}
			b = append(b, '.')
			b = append(b, f...)
		}
		b = append(b, 'S')
	}
	return string(b)
}
