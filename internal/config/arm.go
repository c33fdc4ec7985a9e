package config

// ARM templates (`busbar import`): an Azure Resource Manager deployment
// template, as the portal exports it from a namespace or as written by
// hand (Bicep compiles to one: `az bicep build`), read into an
// EmulatorConfig.
//
//	{ "parameters": {name: {"type", "defaultValue"}},
//	  "variables":  {name: value},
//	  "resources":  [ {"type", "name", "properties", "resources": [child…]} ] }
//
// Resource types read (case-insensitively), top-level with full types and
// "ns/entity/…" names, or nested under their parent with the short type
// ("queues") and the short name:
//
//	Microsoft.ServiceBus/namespaces                              a namespace (its sku is reported)
//	Microsoft.ServiceBus/namespaces/queues                       a queue
//	Microsoft.ServiceBus/namespaces/topics                       a topic
//	Microsoft.ServiceBus/namespaces/topics/subscriptions         a subscription
//	Microsoft.ServiceBus/namespaces/topics/subscriptions/rules   a rule
//	Microsoft.ServiceBus/namespaces/authorizationRules           a namespace policy (rights only)
//	Microsoft.ServiceBus/namespaces/{queues,topics}/authorizationRules   an entity rule (rights only)
//
// Other resource types are skipped with a warning. Entity properties use
// the ARM (camelCase) names, which are Config.json's property names; a
// rule's filterType SqlFilter / CorrelationFilter, sqlFilter,
// correlationFilter and action become Config.json's. Properties Busbar has
// no use for (enableExpress, isClientAffine, requiresPreprocessing,
// compatibilityLevel, read-only counts and times) are dropped; others
// unknown are warnings, as in Config.json. Every string value may be an
// expression (armexpr.go); "copy" loops are not supported. Errors name the
// resource.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ARMImport is what an ARM template declares.
type ARMImport struct {
	// Config holds the namespaces with their queues, topics,
	// subscriptions and rules.
	Config *EmulatorConfig
	// SKUs is each namespace's sku.name as the template gives it (Basic,
	// Standard, Premium), "" if none.
	SKUs map[string]string
	// AuthRules are the authorization rules: of the namespace when Entity
	// is empty, else of that queue or topic. Templates carry rights, not
	// keys.
	AuthRules []ARMAuthRule
	// Warnings are what was skipped or ignored.
	Warnings []string
}

// ARMAuthRule is an authorizationRules resource.
type ARMAuthRule struct {
	Namespace string
	Entity    string // queue or topic name; "" for a namespace rule
	Name      string
	Rights    []string // Manage, Send, Listen
}

// ARMOptions are the template's inputs.
type ARMOptions struct {
	// Parameters override the template parameters' default values. A
	// string given for a parameter of type int, bool, array or object is
	// converted (from JSON for arrays and objects).
	Parameters map[string]any
}

// maxARMResources bounds the resources of one template.
const maxARMResources = 100000

const armNamespaceType = "microsoft.servicebus/namespaces"

// ParseARMParameters reads an ARM parameters file ({"parameters": {name:
// {"value": …}}}) into values for ARMOptions.Parameters.
func ParseARMParameters(data []byte) (map[string]any, error) {
	var f struct {
		Parameters map[string]struct {
			Value json.RawMessage `json:"value"`
		} `json:"parameters"`
	}
	plain, err := stripJSONC(data)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(plain, &f); err != nil {
		return nil, fmt.Errorf("the parameters file is not {\"parameters\": {name: {\"value\": …}}}: %w", err)
	}
	out := map[string]any{}
	for k, p := range f.Parameters {
		if len(p.Value) == 0 {
			return nil, fmt.Errorf("parameter '%s' in the parameters file has no \"value\" (Key Vault references are not supported)", k)
		}
		v, err := decodeARMJSON(p.Value)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// decodeARMJSON decodes JSON with integers as int64 and other numbers as
// json.Number.
func decodeARMJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normalizeNumbers(v), nil
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

// armTemplate is a template being read.
type armTemplate struct {
	params    map[string]map[string]any // declared parameters
	vars      map[string]any
	given     map[string]any
	resolving map[string]bool // parameters and variables being evaluated (cycles)
	cache     map[string]any
}

func (t *armTemplate) parameter(name string) (any, error) {
	key := "p:" + strings.ToLower(name)
	if v, ok := t.cache[key]; ok {
		return v, nil
	}
	var decl map[string]any
	for k, d := range t.params {
		if strings.EqualFold(k, name) {
			decl = d
			name = k
		}
	}
	if decl == nil {
		return nil, fmt.Errorf("the template declares no parameter '%s'", name)
	}
	if t.resolving[key] {
		return nil, fmt.Errorf("parameter '%s' refers to itself", name)
	}
	t.resolving[key] = true
	defer delete(t.resolving, key)
	typ, _ := fieldCI(decl, "type").(string)
	var v any
	if g, ok := t.given[name]; ok {
		cv, err := convertParam(name, typ, g)
		if err != nil {
			return nil, err
		}
		v = cv
	} else if d, ok := lookupCI(decl, "defaultValue"); ok {
		ev, err := t.eval(d)
		if err != nil {
			return nil, fmt.Errorf("the default value of parameter '%s': %w", name, err)
		}
		v = ev
	} else {
		return nil, fmt.Errorf("parameter '%s' has no default value: give it with --param %s=VALUE or a parameters file", name, name)
	}
	if allowed, ok := fieldCI(decl, "allowedValues").([]any); ok {
		found := false
		for _, a := range allowed {
			ja, _ := json.Marshal(a)
			jv, _ := json.Marshal(v)
			found = found || string(ja) == string(jv)
		}
		if !found {
			return nil, fmt.Errorf("parameter '%s' is %v, not one of its allowedValues", name, v)
		}
	}
	t.cache[key] = v
	return v, nil
}

// convertParam converts a value given for a parameter to its declared type.
func convertParam(name, typ string, v any) (any, error) {
	s, isStr := v.(string)
	switch strings.ToLower(typ) {
	case "int":
		if isStr {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parameter '%s' is an int, not '%s'", name, s)
			}
			return n, nil
		}
	case "bool":
		if isStr {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return nil, fmt.Errorf("parameter '%s' is a bool, not '%s'", name, s)
			}
			return b, nil
		}
	case "array", "object", "secureobject":
		if isStr {
			d, err := decodeARMJSON([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("parameter '%s' is an %s, and '%s' is not JSON: %v", name, typ, s, err)
			}
			return d, nil
		}
	}
	return v, nil
}

func (t *armTemplate) variable(name string) (any, error) {
	key := "v:" + strings.ToLower(name)
	if v, ok := t.cache[key]; ok {
		return v, nil
	}
	var raw any
	found := false
	for k, v := range t.vars {
		if strings.EqualFold(k, name) {
			raw, found, name = v, true, k
		}
	}
	if !found {
		return nil, fmt.Errorf("the template declares no variable '%s'", name)
	}
	if t.resolving[key] {
		return nil, fmt.Errorf("variable '%s' refers to itself", name)
	}
	t.resolving[key] = true
	defer delete(t.resolving, key)
	v, err := t.eval(raw)
	if err != nil {
		return nil, fmt.Errorf("variable '%s': %w", name, err)
	}
	t.cache[key] = v
	return v, nil
}

// eval evaluates every expression in a JSON value.
func (t *armTemplate) eval(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return evalARMString(x, t)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ev, err := t.eval(e)
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ev, err := t.eval(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = ev
		}
		return out, nil
	}
	return v, nil
}

// lookupCI finds a key case-insensitively (ARM's own rule).
func lookupCI(m map[string]any, key string) (any, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

func fieldCI(m map[string]any, key string) any {
	v, _ := lookupCI(m, key)
	return v
}

// armResource is a resource with its full type and name evaluated.
type armResource struct {
	typ   string   // lower-case full type
	segs  []string // name segments: namespace, entity, …
	label string   // for messages: type 'name'
	props map[string]any
	sku   string
}

// ParseARMTemplate reads an ARM template (JSON, comments allowed) and
// returns what it declares. The configuration it holds is validated as
// Config.json is; errors name the resource at fault.
func ParseARMTemplate(data []byte, opts ARMOptions) (*ARMImport, error) {
	plain, err := stripJSONC(data)
	if err != nil {
		return nil, ErrorList{{Msg: err.Error()}}
	}
	rootV, err := decodeARMJSON(plain)
	if err != nil {
		return nil, ErrorList{{Msg: "the template is not JSON: " + err.Error()}}
	}
	root, ok := rootV.(map[string]any)
	if !ok {
		return nil, ErrorList{{Msg: "the template is not a JSON object"}}
	}
	t := &armTemplate{params: map[string]map[string]any{}, given: opts.Parameters, resolving: map[string]bool{}, cache: map[string]any{}}
	if ps, ok := fieldCI(root, "parameters").(map[string]any); ok {
		for k, d := range ps {
			dm, ok := d.(map[string]any)
			if !ok {
				return nil, ErrorList{{Msg: fmt.Sprintf("parameter '%s' is not an object", k)}}
			}
			t.params[k] = dm
		}
	}
	for k := range opts.Parameters {
		if _, ok := t.params[k]; !ok {
			return nil, ErrorList{{Msg: fmt.Sprintf("parameter '%s' is given but the template declares no such parameter", k)}}
		}
	}
	t.vars, _ = fieldCI(root, "variables").(map[string]any)
	rs, ok := fieldCI(root, "resources").([]any)
	if !ok {
		return nil, ErrorList{{Msg: "the template has no \"resources\" array"}}
	}
	imp := &ARMImport{SKUs: map[string]string{}}
	var flat []armResource
	var errs ErrorList
	count := 0
	var walk func(list []any, parentType string, parentSegs []string, where string)
	walk = func(list []any, parentType string, parentSegs []string, where string) {
		for i, rv := range list {
			count++
			if count > maxARMResources {
				errs = append(errs, &FieldError{Msg: fmt.Sprintf("the template has more than %d resources", maxARMResources)})
				return
			}
			at := fmt.Sprintf("%s[%d]", where, i)
			r, ok := rv.(map[string]any)
			if !ok {
				errs = append(errs, &FieldError{Path: at, Msg: "is not an object"})
				continue
			}
			res, children, skip, err := t.resource(r, parentType, parentSegs, at)
			if err != nil {
				errs = append(errs, &FieldError{Path: at, Msg: err.Error()})
				continue
			}
			if skip != "" {
				imp.Warnings = append(imp.Warnings, skip)
				continue
			}
			flat = append(flat, res)
			if children != nil {
				walk(children, res.typ, res.segs, at+".resources")
			}
		}
	}
	walk(rs, "", nil, "resources")
	if len(errs) > 0 {
		return nil, errs
	}
	cfgJSON, labels, err := imp.build(flat)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseEmulatorConfig(cfgJSON, Options{})
	if err != nil {
		var el ErrorList
		if asErrorList(err, &el) {
			for _, e := range el {
				relabel(e, labels)
			}
		}
		return nil, err
	}
	for i := range cfg.Warnings {
		relabel(&cfg.Warnings[i], labels)
		imp.Warnings = append(imp.Warnings, cfg.Warnings[i].Error())
	}
	cfg.Warnings = nil
	imp.Config = cfg
	return imp, nil
}

func asErrorList(err error, el *ErrorList) bool {
	l, ok := err.(ErrorList)
	if ok {
		*el = l
	}
	return ok
}

// relabel replaces a Config.json path prefix with the resource it came from.
func relabel(e *FieldError, labels map[string]string) {
	best := ""
	for p := range labels {
		if (e.Path == p || strings.HasPrefix(e.Path, p+".")) && len(p) > len(best) {
			best = p
		}
	}
	if best != "" {
		e.Path = labels[best] + strings.TrimPrefix(e.Path, best)
	}
}

// resource evaluates one resource's type and name. skip is a warning for a
// resource that is not read (and whose children are not either).
func (t *armTemplate) resource(r map[string]any, parentType string, parentSegs []string, at string) (res armResource, children []any, skip string, err error) {
	typ, _ := fieldCI(r, "type").(string)
	nameV, _ := lookupCI(r, "name")
	if typ == "" {
		return res, nil, "", fmt.Errorf("has no \"type\"")
	}
	if _, ok := lookupCI(r, "copy"); ok {
		return res, nil, "", fmt.Errorf("%s: \"copy\" loops are not supported; write each resource out", typ)
	}
	if c, ok := lookupCI(r, "condition"); ok {
		cv, err := t.eval(c)
		if err != nil {
			return res, nil, "", fmt.Errorf("%s: condition: %w", typ, err)
		}
		if b, ok := cv.(bool); ok && !b {
			return res, nil, fmt.Sprintf("%s %s: skipped, its condition is false", at, typ), nil
		}
	}
	nv, err := t.eval(nameV)
	if err != nil {
		return res, nil, "", fmt.Errorf("%s: name: %w", typ, err)
	}
	name, ok := nv.(string)
	if !ok || name == "" {
		return res, nil, "", fmt.Errorf("%s: the name is %s, not a string", typ, armTypeName(nv))
	}
	full := strings.ToLower(typ)
	if parentType != "" && !strings.Contains(typ, "/") {
		full = parentType + "/" + strings.ToLower(typ)
	}
	segs := strings.Split(name, "/")
	if want := strings.Count(full, "/"); parentType != "" && len(segs) < want && len(parentSegs)+len(segs) == want {
		segs = append(append([]string{}, parentSegs...), segs...)
	}
	label := fmt.Sprintf("%s '%s'", typ, strings.Join(segs, "/"))
	children, _ = fieldCI(r, "resources").([]any)
	if !strings.HasPrefix(full, armNamespaceType) {
		return res, nil, fmt.Sprintf("%s: skipped, not a Service Bus resource", label), nil
	}
	known := map[string]bool{
		armNamespaceType:                                 true,
		armNamespaceType + "/queues":                     true,
		armNamespaceType + "/topics":                     true,
		armNamespaceType + "/topics/subscriptions":       true,
		armNamespaceType + "/topics/subscriptions/rules": true,
		armNamespaceType + "/authorizationrules":         true,
		armNamespaceType + "/queues/authorizationrules":  true,
		armNamespaceType + "/topics/authorizationrules":  true,
	}
	if !known[full] {
		return res, nil, fmt.Sprintf("%s: skipped, Busbar has no such resource", label), nil
	}
	if want := strings.Count(full, "/"); len(segs) != want {
		return res, nil, "", fmt.Errorf("%s: the name has %d segment(s), a %s needs %d", label, len(segs), typ, want)
	}
	pv, _ := lookupCI(r, "properties")
	props := map[string]any{}
	if pv != nil && full != armNamespaceType { // a namespace's own settings (TLS, network, …) are not read
		ev, err := t.eval(pv)
		if err != nil {
			return res, nil, "", fmt.Errorf("%s: properties: %w", label, err)
		}
		m, ok := ev.(map[string]any)
		if !ok {
			return res, nil, "", fmt.Errorf("%s: properties is %s, not an object", label, armTypeName(ev))
		}
		props = m
	}
	res = armResource{typ: full, segs: segs, label: label, props: props}
	if full == armNamespaceType {
		if sku, ok := fieldCI(r, "sku").(map[string]any); ok {
			sv, err := t.eval(fieldCI(sku, "name"))
			if err != nil {
				return res, nil, "", fmt.Errorf("%s: sku: %w", label, err)
			}
			res.sku, _ = sv.(string)
		}
	}
	return res, children, "", nil
}

// Properties dropped without a word: Azure-only knobs and read-only values
// an export carries.
var armIgnored = map[string]bool{
	"enableexpress": true, "isclientaffine": true, "clientaffineproperties": true,
	"requirespreprocessing": true, "compatibilitylevel": true, "countdetails": true,
	"sizeinbytes": true, "messagecount": true, "createdat": true, "updatedat": true,
	"accessedat": true, "subscriptioncount": true,
}

func cleanProps(props map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range props {
		if armIgnored[strings.ToLower(k)] || v == nil {
			continue
		}
		if s, ok := v.(string); ok && s == "" && (strings.EqualFold(k, "forwardTo") || strings.EqualFold(k, "forwardDeadLetteredMessagesTo")) {
			continue
		}
		out[k] = v
	}
	return out
}

type armNS struct {
	name   string
	queues []string
	topics []string
	q      map[string]map[string]any
	t      map[string]*armTopic
}

type armTopic struct {
	props map[string]any
	subs  []string
	s     map[string]*armSub
}

type armSub struct {
	props map[string]any
	rules []map[string]any // Config.json rules
	label string
}

// armTree gathers the resources by namespace, topic and subscription,
// matching names case-insensitively and keeping the order of first mention.
type armTree struct {
	order []string // namespace keys
	nss   map[string]*armNS
}

func (tr *armTree) ns(name string) *armNS {
	key := strings.ToLower(name)
	if n := tr.nss[key]; n != nil {
		return n
	}
	n := &armNS{name: name, q: map[string]map[string]any{}, t: map[string]*armTopic{}}
	tr.nss[key] = n
	tr.order = append(tr.order, key)
	return n
}

func (n *armNS) topic(name string) *armTopic {
	key := strings.ToLower(name)
	if t := n.t[key]; t != nil {
		return t
	}
	t := &armTopic{s: map[string]*armSub{}}
	n.t[key] = t
	n.topics = append(n.topics, name)
	return t
}

func (t *armTopic) sub(name, label string) *armSub {
	key := strings.ToLower(name)
	if s := t.s[key]; s != nil {
		return s
	}
	s := &armSub{label: label}
	t.s[key] = s
	t.subs = append(t.subs, name)
	return s
}

// build turns the resources into Config.json text, with a label per
// Config.json path for messages: it gathers them into a tree, then writes
// the tree out namespace by namespace.
func (imp *ARMImport) build(flat []armResource) ([]byte, map[string]string, error) {
	tr := &armTree{nss: map[string]*armNS{}}
	var errs ErrorList
	for _, r := range flat {
		errs = append(errs, imp.add(tr, r)...)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	labels := map[string]string{}
	var namespaces []any
	for i, key := range tr.order {
		namespaces = append(namespaces, imp.emitNS(tr.nss[key], i, labels))
	}
	if len(namespaces) == 0 {
		return nil, nil, ErrorList{{Msg: "the template declares no Service Bus namespace, queue or topic"}}
	}
	b, err := json.Marshal(map[string]any{"UserConfig": map[string]any{"Namespaces": namespaces}})
	if err != nil {
		return nil, nil, ErrorList{{Msg: err.Error()}}
	}
	sort.Strings(imp.Warnings)
	return b, labels, nil
}

// add puts resource r into the tree (authorization rules into
// imp.AuthRules), returning what is wrong with it.
func (imp *ARMImport) add(tr *armTree, r armResource) ErrorList {
	twice := func() ErrorList { return ErrorList{{Path: r.label, Msg: "is declared twice"}} }
	n := tr.ns(r.segs[0])
	switch r.typ {
	case armNamespaceType:
		if r.sku != "" {
			imp.SKUs[n.name] = r.sku
		}
	case armNamespaceType + "/queues":
		key := strings.ToLower(r.segs[1])
		if n.q[key] != nil {
			return twice()
		}
		n.q[key] = cleanProps(r.props)
		n.queues = append(n.queues, r.segs[1])
	case armNamespaceType + "/topics":
		t := n.topic(r.segs[1])
		if t.props != nil {
			return twice()
		}
		t.props = cleanProps(r.props)
	case armNamespaceType + "/topics/subscriptions":
		s := n.topic(r.segs[1]).sub(r.segs[2], r.label)
		if s.props != nil {
			return twice()
		}
		s.props = cleanProps(r.props)
	case armNamespaceType + "/topics/subscriptions/rules":
		s := n.topic(r.segs[1]).sub(r.segs[2], "")
		rule, err := armRule(r)
		if err != nil {
			return ErrorList{{Path: r.label, Msg: err.Error()}}
		}
		if strings.EqualFold(r.segs[3], "$Default") {
			s.rules = append([]map[string]any{rule}, s.rules...)
		} else {
			s.rules = append(s.rules, rule)
		}
	case armNamespaceType + "/authorizationrules", armNamespaceType + "/queues/authorizationrules", armNamespaceType + "/topics/authorizationrules":
		return imp.addAuthRule(n, r)
	}
	return nil
}

// addAuthRule adds an authorization rule resource to imp.AuthRules.
func (imp *ARMImport) addAuthRule(n *armNS, r armResource) ErrorList {
	var errs ErrorList
	ar := ARMAuthRule{Namespace: n.name, Name: r.segs[len(r.segs)-1]}
	if len(r.segs) == 3 {
		ar.Entity = r.segs[1]
	}
	rights, _ := fieldCI(r.props, "rights").([]any)
	for _, x := range rights {
		s, ok := x.(string)
		if !ok {
			errs = append(errs, &FieldError{Path: r.label, Msg: "rights must be strings (Manage, Send, Listen)"})
			continue
		}
		ar.Rights = append(ar.Rights, s)
	}
	if len(ar.Rights) == 0 {
		return append(errs, &FieldError{Path: r.label, Msg: "has no rights (Manage, Send, Listen)"})
	}
	imp.AuthRules = append(imp.AuthRules, ar)
	return errs
}

// emitNS writes out namespace n, the i-th, as a Config.json namespace,
// adding the labels of its paths.
func (imp *ARMImport) emitNS(n *armNS, i int, labels map[string]string) any {
	np := fmt.Sprintf("UserConfig.Namespaces[%d]", i)
	labels[np] = fmt.Sprintf("Microsoft.ServiceBus/namespaces '%s'", n.name)
	var queues, topics []any
	for j, qn := range n.queues {
		labels[fmt.Sprintf("%s.Queues[%d]", np, j)] = fmt.Sprintf("Microsoft.ServiceBus/namespaces/queues '%s/%s'", n.name, qn)
		queues = append(queues, map[string]any{"Name": qn, "Properties": n.q[strings.ToLower(qn)]})
	}
	for j, tn := range n.topics {
		topics = append(topics, imp.emitTopic(n, tn, fmt.Sprintf("%s.Topics[%d]", np, j), labels))
	}
	return map[string]any{"Name": n.name, "Queues": queues, "Topics": topics}
}

// emitTopic writes out topic tn of namespace n, at Config.json path tp,
// with its subscriptions and their rules.
func (imp *ARMImport) emitTopic(n *armNS, tn, tp string, labels map[string]string) any {
	t := n.t[strings.ToLower(tn)]
	labels[tp] = fmt.Sprintf("Microsoft.ServiceBus/namespaces/topics '%s/%s'", n.name, tn)
	if t.props == nil {
		imp.Warnings = append(imp.Warnings, fmt.Sprintf("topic '%s/%s' is not declared in the template (only its subscriptions): created with default properties", n.name, tn))
		t.props = map[string]any{}
	}
	var subs []any
	for k, sn := range t.subs {
		s := t.s[strings.ToLower(sn)]
		sp := fmt.Sprintf("%s.Subscriptions[%d]", tp, k)
		labels[sp] = fmt.Sprintf("Microsoft.ServiceBus/namespaces/topics/subscriptions '%s/%s/%s'", n.name, tn, sn)
		if s.props == nil {
			imp.Warnings = append(imp.Warnings, fmt.Sprintf("subscription '%s/%s/%s' is not declared in the template (only its rules): created with default properties", n.name, tn, sn))
			s.props = map[string]any{}
		}
		for r := range s.rules {
			labels[fmt.Sprintf("%s.Rules[%d]", sp, r)] = fmt.Sprintf("Microsoft.ServiceBus/namespaces/topics/subscriptions/rules '%s/%s/%s/%s'", n.name, tn, sn, s.rules[r]["Name"])
		}
		entry := map[string]any{"Name": sn, "Properties": s.props}
		if len(s.rules) > 0 {
			entry["Rules"] = s.rules
		}
		subs = append(subs, entry)
	}
	return map[string]any{"Name": tn, "Properties": t.props, "Subscriptions": subs}
}

// armRule converts a rule resource into a Config.json rule.
func armRule(r armResource) (map[string]any, error) {
	p := r.props
	rule := map[string]any{"Name": r.segs[3]}
	props := map[string]any{}
	ft, _ := fieldCI(p, "filterType").(string)
	sql, hasSQL := fieldCI(p, "sqlFilter").(map[string]any)
	corr, hasCorr := fieldCI(p, "correlationFilter").(map[string]any)
	switch {
	case strings.EqualFold(ft, "SqlFilter") || (ft == "" && hasSQL && !hasCorr):
		if !hasSQL {
			return nil, fmt.Errorf("filterType is SqlFilter but there is no sqlFilter")
		}
		props["FilterType"] = "Sql"
		props["SqlFilter"] = map[string]any{"SqlExpression": fieldCI(sql, "sqlExpression")}
	case strings.EqualFold(ft, "CorrelationFilter") || (ft == "" && hasCorr):
		if !hasCorr {
			return nil, fmt.Errorf("filterType is CorrelationFilter but there is no correlationFilter")
		}
		props["FilterType"] = "Correlation"
		props["CorrelationFilter"] = cleanProps(corr)
	case ft == "":
		return nil, fmt.Errorf("has no filterType, sqlFilter or correlationFilter")
	default:
		return nil, fmt.Errorf("filterType '%s' is neither SqlFilter nor CorrelationFilter", ft)
	}
	if a, ok := fieldCI(p, "action").(map[string]any); ok {
		if e, ok := fieldCI(a, "sqlExpression").(string); ok && strings.TrimSpace(e) != "" {
			props["Action"] = map[string]any{"SqlExpression": e}
		}
	}
	rule["Properties"] = props
	return rule, nil
}
