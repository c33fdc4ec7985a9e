package config

import (
	"errors"
	"math"
	"slices"
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
	total, ok := isoComponents(t[1:])
	if !ok {
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

// isoUnit is an ISO 8601 duration designator and what one of it is worth.
type isoUnit struct {
	c    byte
	unit time.Duration
}

// The designators allowed in the date and the time part, in the order
// they must appear.
var (
	isoDateUnits = []isoUnit{{'Y', 365 * day}, {'M', 30 * day}, {'W', 7 * day}, {'D', day}}
	isoTimeUnits = []isoUnit{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}}
)

// isoComponents adds up the components of a duration after its P, in
// nanoseconds saturated at 1<<63; ok is false unless there is at least
// one, each in its place, and a T is followed by one.
func isoComponents(t string) (total uint64, ok bool) {
	add := func(n uint64, unit time.Duration) {
		const limit = 1 << 63
		u := uint64(unit)
		if n > limit/u || n*u > limit-total {
			total = limit
			return
		}
		total += n * u
	}
	components := 0
	inTime := false
	units := isoDateUnits // those still allowed in the current part
	for t != "" {
		if t[0] == 'T' || t[0] == 't' {
			if inTime || len(t) == 1 { // a T must be followed by a component
				return 0, false
			}
			inTime, units, t = true, isoTimeUnits, t[1:]
			continue
		}
		n, frac, hasFrac, rest, ok := isoNumber(t)
		if !ok || rest == "" { // a number needs a designator
			return 0, false
		}
		c := rest[0] &^ 0x20 // upper case
		k := slices.IndexFunc(units, func(u isoUnit) bool { return u.c == c })
		if k < 0 || (hasFrac && (!inTime || c != 'S')) {
			return 0, false
		}
		add(n, units[k].unit)
		add(frac, 1)
		units = units[k+1:]
		components++
		t = rest[1:]
	}
	return total, components > 0
}

// isoNumber reads the number at the start of t: digits, then optionally
// a '.' or ',' and more digits, the fraction in nanoseconds (digits beyond
// nine dropped). rest is what follows.
func isoNumber(t string) (n, frac uint64, hasFrac bool, rest string, ok bool) {
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, 0, false, "", false
	}
	n = parseDigits(t[:i])
	if i == len(t) || (t[i] != '.' && t[i] != ',') {
		return n, 0, false, t[i:], true
	}
	j := i + 1
	for j < len(t) && t[j] >= '0' && t[j] <= '9' {
		j++
	}
	if j == i+1 {
		return 0, 0, false, "", false
	}
	digits := t[i+1 : j]
	if len(digits) > 9 {
		digits = digits[:9]
	}
	frac = parseDigits(digits)
	for k := len(digits); k < 9; k++ {
		frac *= 10
	}
	return n, frac, true, t[j:], true
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
