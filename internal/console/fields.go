package console

import (
	"fmt"
	"html/template"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
)

// field is one editable entity property, found by reflection on the
// broker's properties struct, so the form has every property the admin
// API has.
type field struct {
	Name      string
	Kind      string // duration, bool, int, string, status
	Value     string
	Checked   bool
	Immutable bool
}

// Properties the form leaves out: kept as they are (echoed-only legacy
// values, the URIs behind ForwardTo, the authorization rules).
var skipFields = map[string]bool{
	"ForwardToAddress": true, "ForwardDeadLetteredMessagesToAddress": true,
	"EnableExpress": true, "IsAnonymousAccessible": true, "AuthorizationRules": true,
	"EnablePartitioning": true,
}

// immutableFields cannot change after creation.
var immutableFields = map[string]bool{"RequiresSession": true, "RequiresDuplicateDetection": true}

var (
	durationType = reflect.TypeFor[time.Duration]()
	statusType   = reflect.TypeFor[broker.EntityStatus]()
)

func fieldsOf(props any) []field {
	v := reflect.ValueOf(props).Elem()
	var out []field
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if skipFields[sf.Name] || !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		f := field{Name: sf.Name, Immutable: immutableFields[sf.Name]}
		switch {
		case sf.Type == durationType:
			f.Kind = "duration"
			f.Value = formatDuration(time.Duration(fv.Int()))
		case sf.Type == statusType:
			f.Kind, f.Value = "status", fv.String()
		case sf.Type.Kind() == reflect.Bool:
			f.Kind, f.Checked = "bool", fv.Bool()
		case sf.Type.Kind() == reflect.Int32 || sf.Type.Kind() == reflect.Int64:
			f.Kind, f.Value = "int", strconv.FormatInt(fv.Int(), 10)
		case sf.Type.Kind() == reflect.String:
			f.Kind, f.Value = "string", fv.String()
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

// applyFields sets props (a pointer to a properties struct) from the
// form's fields of the same names. A bool field is a checkbox: absent
// means false, so every bool of fieldsOf is set.
func applyFields(props any, form url.Values) error {
	v := reflect.ValueOf(props).Elem()
	for _, f := range fieldsOf(props) {
		if f.Immutable {
			continue
		}
		fv := v.FieldByName(f.Name)
		val := strings.TrimSpace(form.Get(f.Name))
		switch f.Kind {
		case "bool":
			fv.SetBool(val != "")
		case "duration":
			d, err := parseDuration(val)
			if err != nil {
				return badInput("%s: %v", f.Name, err)
			}
			fv.SetInt(int64(d))
		case "int":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return badInput("%s: '%s' is not a whole number.", f.Name, val)
			}
			fv.SetInt(n)
		case "status":
			fv.SetString(val)
		case "string":
			fv.SetString(val)
		}
	}
	return nil
}

func formatDuration(d time.Duration) string {
	if d == broker.Infinite {
		return "Infinite"
	}
	return d.String()
}

func parseDuration(s string) (time.Duration, error) {
	if strings.EqualFold(s, "infinite") || s == "" {
		return broker.Infinite, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("'%s' is not a duration such as 30s, 5m, 48h or Infinite", s)
	}
	return d, nil
}

var funcs = template.FuncMap{
	"q":     url.QueryEscape,
	"time":  func(t time.Time) string { return fmtTime(t) },
	"deref": func(t *time.Time) time.Time { return *t },
	"bytes": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"state": func(d *broker.Delivery) string {
		if !d.LockedUntil.IsZero() {
			return "Locked"
		}
		switch d.State {
		case broker.StateDeferred:
			return "Deferred"
		case broker.StateScheduled:
			return "Scheduled"
		}
		return "Active"
	},
	"prop": func(d *broker.Delivery, k string) any { return d.Message.ApplicationProperties[k] },
	"preview": func(d *broker.Delivery) string {
		t := decodeBody(d.Message.Body).Render("text")
		if len(t) > 80 {
			t = t[:80] + "…"
		}
		return t
	},
	"str": func(v any) string {
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	},
	"statuses":  func() []string { return []string{"Active", "Disabled", "SendDisabled", "ReceiveDisabled"} },
	"ruleText":  ruleText,
	"list":      func(v ...string) []string { return v },
	"canManage": func(r auth.Rights) bool { return r.Has(auth.Manage) },
	"canSend":   func(r auth.Rights) bool { return r.Has(auth.Send) },
}

func fmtTime(t time.Time) string {
	if t.IsZero() || t.Year() > 9000 {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}
