package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/config"
)

// parseDuration reads a duration as an operator writes it: a Go duration
// (30s, 1h30m), with an optional leading day count (7d, 1d12h), an ISO 8601
// duration as Service Bus writes them (PT1M, P14D), or "never".
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "never", "infinite", "max":
		return config.MaxDuration, nil
	case "":
		return 0, fmt.Errorf("empty duration")
	}
	if t[0] == 'P' || t[0] == 'p' || strings.HasPrefix(t, "-P") || strings.HasPrefix(t, "-p") {
		return config.ParseISO8601(t)
	}
	var days time.Duration
	if i := strings.IndexByte(t, 'd'); i > 0 {
		n, err := strconv.ParseInt(t[:i], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		days, t = time.Duration(n)*24*time.Hour, t[i+1:]
		if t == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 30s, 5m, 1h30m, 7d, PT1M or never)", s)
	}
	return days + d, nil
}

// isoDuration converts a duration flag to the ISO 8601 text the
// management API takes.
func isoDuration(flag, s string) (*string, error) {
	d, err := parseDuration(s)
	if err != nil {
		return nil, usageErrorf("--%s: %v", flag, err)
	}
	iso := config.FormatISO8601(d)
	return &iso, nil
}

// parseSchedule reads --schedule: an RFC 3339 time, a local date and time
// (2006-01-02T15:04:05 or with a space), or a duration from now.
func parseSchedule(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if d, err := parseDuration(s); err == nil && d < config.MaxDuration {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q (want RFC 3339, e.g. 2030-01-02T15:04:05Z, or a duration from now, e.g. 10m)", s)
}

// propertyTypes are the explicit types of --property k:type=v.
var propertyTypes = map[string]func(string) (any, error){
	"string": func(v string) (any, error) { return v, nil },
	"int":    func(v string) (any, error) { return strconv.ParseInt(v, 10, 64) },
	"long":   func(v string) (any, error) { return strconv.ParseInt(v, 10, 64) },
	"int64":  func(v string) (any, error) { return strconv.ParseInt(v, 10, 64) },
	"int32": func(v string) (any, error) {
		n, err := strconv.ParseInt(v, 10, 32)
		return int32(n), err
	},
	"double":  func(v string) (any, error) { return strconv.ParseFloat(v, 64) },
	"float":   func(v string) (any, error) { return strconv.ParseFloat(v, 64) },
	"float64": func(v string) (any, error) { return strconv.ParseFloat(v, 64) },
	"bool":    func(v string) (any, error) { return strconv.ParseBool(v) },
	"time":    func(v string) (any, error) { return time.Parse(time.RFC3339Nano, v) },
}

// parseProperty reads one --property: key=value, with the value an int64
// if it is an integer, a bool if it is true or false, else a string; or
// key:type=value with type one of string, int (long, int64), int32, double
// (float, float64), bool or time (RFC 3339). A key containing ':' followed
// by anything but a type name is taken whole.
func parseProperty(s string) (string, any, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", nil, fmt.Errorf("invalid property %q (want key=value or key:type=value)", s)
	}
	if i := strings.LastIndexByte(k, ':'); i > 0 {
		if conv, ok := propertyTypes[strings.ToLower(k[i+1:])]; ok {
			val, err := conv(v)
			if err != nil {
				return "", nil, fmt.Errorf("property %q: %q is not a valid %s", k[:i], v, k[i+1:])
			}
			return k[:i], val, nil
		}
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return k, n, nil
	}
	switch v {
	case "true":
		return k, true, nil
	case "false":
		return k, false, nil
	}
	return k, v, nil
}

// parseProperties reads every --property into a map.
func parseProperties(list []string) (map[string]any, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(list))
	for _, s := range list {
		k, v, err := parseProperty(s)
		if err != nil {
			return nil, usageErrorf("--property: %v", err)
		}
		m[k] = v
	}
	return m, nil
}
