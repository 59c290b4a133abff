package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// decoder walks the yaml.Node tree into a Config, guided by the structs'
// yaml tags, then validates it. It collects errors instead of stopping, and
// remembers the line of every key so validation errors can point at it.
type decoder struct {
	file  string
	env   func(string) (string, bool)
	errs  Errors
	lines map[string]int      // key -> line where it appears ("" is the root)
	set   map[string]bool     // keys given a non-null value
	bad   map[string]bool     // keys with a decode error: validation skips them
	unset map[string][]string // key -> unset variables its value referenced

	inAlias     int // > 0 while decoding through an alias
	aliasVisits int // values decoded while inAlias > 0
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data as exactly one YAML document and returns its root
// node, nil for an empty document, and false on a syntax error.
func (d *decoder) document(data []byte) (root *yaml.Node, ok bool) {
	d.lines[""] = 1
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeNode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		d.syntaxError(data, err)
		return nil, false
	}
	// Empty documents after it (a trailing "---", as templating tools
	// write between files) hold nothing and are ignored.
	for {
		var extra yaml.Node
		err := decodeNode(dec, &extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.syntaxError(data, err)
			return nil, false
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			d.errorf(extra.Line, "", "only one YAML document is allowed; remove the second one (the --- line)")
			return nil, false
		}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, true
	}
	root = doc.Content[0]
	if root.Kind != yaml.MappingNode {
		d.errorf(root.Line, "", "the top level must be a mapping of keys such as server, admin, sources; got %s", kindName(root))
		return nil, false
	}
	d.lines[""] = root.Line
	return root, true
}

// decodeNode is dec.Decode with a panic in the third-party parser turned into
// an error: config is outside input and must never crash the process.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse document: %v", r)
		}
	}()
	return dec.Decode(n)
}

func (d *decoder) syntaxError(data []byte, err error) {
	if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		msg := m[2]
		if slices.Contains(yamlParserProblems, msg) {
			// gopkg.in/yaml.v3 numbers a parser error's line from 0 (a
			// scanner error's from 1): the line of the mapping or list
			// the mistake is in, one above it as printed.
			line++
			msg += " in the mapping or list that starts here (an entry below it is not closed, or not indented as its siblings)"
		}
		d.errorf(line, "", "invalid YAML: %s", msg)
		return
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := problemLine(data, msg)
	if yamlUnknownAnchor.MatchString(msg) {
		// The alias's name may be a secret written unquoted: "token: *S3cret".
		msg = "an alias (*name) to no anchor; quote a value that starts with *"
	}
	d.errorf(line, "", "invalid YAML: %s", msg)
}

// yamlParserProblems are the errors of gopkg.in/yaml.v3's parser (v3.0.1,
// parserc.go), as opposed to its scanner's: their line is 0-based.
var yamlParserProblems = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected <stream-start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// yamlUnknownAnchor is the parser's error for an alias to no anchor.
var yamlUnknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// problemLine finds the line of a YAML error the parser gives without one:
// the first alias to an unknown anchor, or else the first byte that is not
// UTF-8 or a control character YAML does not allow. 0 if none is found.
func problemLine(data []byte, msg string) int {
	at := -1
	if m := yamlUnknownAnchor.FindStringSubmatch(msg); m != nil {
		re := regexp.MustCompile(`\*` + regexp.QuoteMeta(m[1]) + `([\s,\]}]|$)`)
		if loc := re.FindIndex(data); loc != nil {
			at = loc[0]
		}
	} else {
		for i := 0; i < len(data); {
			r, n := utf8.DecodeRune(data[i:])
			if (r == utf8.RuneError && n == 1) || (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f {
				at = i
				break
			}
			i += n
		}
	}
	if at < 0 {
		return 0
	}
	return 1 + bytes.Count(data[:at], []byte("\n"))
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	switch {
	case len(d.errs) > maxErrors:
		return
	case len(d.errs) == maxErrors:
		d.errs = append(d.errs, Error{File: d.file, Line: line, Msg: "too many errors; stopping here"})
		return
	}
	if key != "" {
		d.bad[key] = true
	}
	d.errs = append(d.errs, Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[Duration]()
	sizeType     = reflect.TypeFor[Size]()
)

// value decodes n into v. line is the line of the key that holds n.
// A null value (~, null or nothing) leaves v as it is, i.e. at its default.
func (d *decoder) value(n *yaml.Node, v reflect.Value, key string, line int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		d.inAlias++
		defer func() { d.inAlias-- }()
		n = n.Alias
	}
	if d.inAlias > 0 && !d.visit(1, line) {
		return
	}
	if n.Style&yaml.TaggedStyle != 0 && n.Tag != "!!str" {
		// Values are read from their text: "!!binary c2Vj" would be that
		// text, not the bytes it encodes, and "!!int abc" would pass. Only
		// YAML's standard tags are named (a custom one may be a secret
		// written unquoted, as "token: !S3cret" is).
		tag := "a tag"
		if slices.Contains([]string{"!!binary", "!!bool", "!!float", "!!int", "!!map", "!!null", "!!seq", "!!timestamp", "!!merge"}, n.Tag) {
			tag = n.Tag
		}
		d.errorf(line, key, "%s is not supported here: write the value without it (quote it to keep it text)", tag)
		return
	}
	if isNull(n) {
		if tokenTenant(key) {
			// The default is the operator: a tenant left blank (what a
			// template renders for a missing value) must not grant it.
			d.errorf(line, key, `is empty: write tenant: "" for an operator token (all tenants), or name the tenant`)
		}
		return
	}
	d.set[key] = true
	switch {
	case v.Type() == durationType || v.Type() == sizeType:
		d.scalar(n, v, key, line)
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(newDefaulted(v.Type().Elem()))
		}
		d.value(n, v.Elem(), key, line)
	case v.Kind() == reflect.Struct:
		d.structure(n, v, key, line)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, key, line)
	case v.Kind() == reflect.Map:
		d.stringMap(n, v, key, line)
	default:
		d.scalar(n, v, key, line)
	}
}

// tokenTenant reports whether key is an admin token's tenant.
func tokenTenant(key string) bool {
	return strings.HasPrefix(key, "admin.tokens[") && strings.HasSuffix(key, "].tenant") && strings.Count(key, ".") == 2
}

// newDefaulted returns a pointer to a new t with its defaults applied.
func newDefaulted(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if df, ok := p.Interface().(defaulter); ok {
		df.setDefaults()
	}
	return p
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.MappingNode, key, line) {
		return
	}
	names := yamlNames(v.Type())
	d.pairs(n, key, func(name, child string, k, val *yaml.Node) {
		idx := slices.Index(names, name)
		if idx < 0 {
			if strings.Contains(name, ":") {
				d.errorf(k.Line, child, "unknown key (is the blank after ':' missing?)")
				return
			}
			if strings.ContainsAny(name, keyCuts) {
				d.errorf(k.Line, child, "unknown key (write a key and its value as key: value)")
				return
			}
			d.errorf(k.Line, child, "unknown key%s", suggest(name, names))
			return
		}
		d.lines[child] = k.Line
		d.value(val, v.Field(idx), child, k.Line)
	})
}

// pairs calls fn for each key-value pair of mapping n whose key is a plain
// scalar not seen before in n; other keys are errors. child is the key's
// full name. YAML merge keys ("<<: *defaults", or a list of such) add the
// pairs of the mappings they name, where n does not set the key itself.
func (d *decoder) pairs(n *yaml.Node, key string, fn func(name, child string, k, val *yaml.Node)) {
	seen := map[string]int{}
	var merges []*yaml.Node // each a merge key's value, after its key
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge" && k.Value == "<<":
			merges = append(merges, k, val)
			continue
		case k.Kind != yaml.ScalarNode:
			d.errorf(k.Line, key, "mapping keys must be plain strings")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, joinKey(key, k.Value), "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, joinKey(key, k.Value), k, val)
	}
	for i := 0; i+1 < len(merges); i += 2 {
		d.merge(merges[i+1], key, merges[i].Line, seen, fn)
	}
}

// merge adds the pairs of the mapping (or list of mappings) a merge key
// (at line) names whose keys are not in seen yet: the first mapping to set
// a key wins, as YAML's merge keys say.
func (d *decoder) merge(m *yaml.Node, key string, line int, seen map[string]int, fn func(name, child string, k, val *yaml.Node)) {
	if m.Kind == yaml.AliasNode && m.Alias != nil {
		d.inAlias++
		defer func() { d.inAlias-- }()
		m = m.Alias
	}
	switch m.Kind {
	case yaml.SequenceNode:
		for _, e := range m.Content {
			d.merge(e, key, line, seen, fn)
		}
	case yaml.MappingNode:
		// Through an alias, every pair walked counts as a visit, whether
		// it is taken or not: a mapping merged again and again (or into
		// itself) is work a small file multiplies.
		if d.inAlias > 0 && !d.visit(len(m.Content)/2, line) {
			return
		}
		d.pairs(m, key, func(name, child string, k, val *yaml.Node) {
			if _, set := seen[name]; set {
				return
			}
			seen[name] = k.Line
			fn(name, child, k, val)
		})
	default:
		d.errorf(line, key, "a merge key (<<) takes a mapping or a list of mappings, got %s", kindName(m))
	}
}

// visit counts n values decoded or walked through aliases, and reports
// whether that is still within maxAliasVisits (saying so once when not).
func (d *decoder) visit(n, line int) bool {
	before := d.aliasVisits
	d.aliasVisits += n
	if d.aliasVisits <= maxAliasVisits {
		return true
	}
	if before <= maxAliasVisits {
		d.errorf(line, "", "too many alias expansions: write the values out instead")
	}
	return false
}

// yamlNames returns the yaml tag of each field of struct type t, by index.
func yamlNames(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("yaml")
	}
	return names
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.SequenceNode, key, line) {
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		child := fmt.Sprintf("%s[%d]", key, i)
		d.lines[child] = item.Line
		elem := newDefaulted(v.Type().Elem()).Elem()
		d.value(item, elem, child, item.Line)
		s = reflect.Append(s, elem)
	}
	v.Set(s)
}

func (d *decoder) stringMap(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.MappingNode, key, line) {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	d.pairs(n, key, func(name, child string, k, val *yaml.Node) {
		d.lines[child] = k.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, child, k.Line)
		m.SetMapIndex(reflect.ValueOf(name), elem)
	})
	v.Set(m)
}

// scalar expands ${VAR} references in n and types the result for v. The
// YAML tag is ignored on purpose: "${PORT:-8080}" is a string to YAML but
// an integer to us, so typing happens after expansion, on the text.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, key string, line int) {
	if !d.kind(n, yaml.ScalarNode, key, line) {
		return
	}
	exp, err := expandEnv(n.Value, d.env)
	if err != nil {
		d.errorf(line, key, "%v", err)
		return
	}
	if len(exp.unset) > 0 {
		// Fail closed: an unset or empty variable must not quietly shorten
		// a value ("hg_${TOKEN}" becoming the guessable "hg_") or empty it
		// (a token's tenant "${T}" becoming "", the operator).
		d.unset[key] = exp.unset
		d.errorf(line, key, "environment variable %s is not set or is empty (write ${NAME:-default} where a value may be left out)",
			strings.Join(exp.unset, ", "))
		return
	}
	if err := setScalar(v, exp.value); err != nil {
		d.errorf(line, key, "%v", err)
	}
}

// setScalar parses s into v according to v's type. Error texts quote s only
// for numbers, booleans, durations and sizes, which are never secrets.
func setScalar(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		return v.Addr().Interface().(*Duration).UnmarshalText([]byte(s))
	case v.Type() == sizeType:
		return v.Addr().Interface().(*Size).UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, ok := parseBool(s)
		if !ok {
			return fmt.Errorf("invalid boolean %q: want true or false", s)
		}
		v.SetBool(b)
	case reflect.Int:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return fmt.Errorf("invalid integer %q", s)
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("invalid number %q", s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported config type %s", v.Type()) // a bug in this file
	}
	return nil
}

// parseBool accepts the YAML 1.2 core booleans only; yes/no/on/off are
// errors rather than guesses.
func parseBool(s string) (value, ok bool) {
	switch s {
	case "true", "True", "TRUE":
		return true, true
	case "false", "False", "FALSE":
		return false, true
	}
	return false, false
}

// kind reports whether n has the wanted kind, recording an error if not.
func (d *decoder) kind(n *yaml.Node, want yaml.Kind, key string, line int) bool {
	if n.Kind == want {
		return true
	}
	names := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list", yaml.ScalarNode: "a single value"}
	d.errorf(line, key, "expected %s, got %s", names[want], kindName(n))
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	}
	return "an unresolved alias"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// keyCuts are the characters a key name is cut at in errors (joinKey).
const keyCuts = ":= \t"

// joinKey appends name to the dotted key parent. A name with unprintable
// characters is quoted, so that every error stays on one line. A name is
// cut at a colon, an equals sign or a blank: no key (and no header name)
// has one, and "{token:S3cret}" (the blank after the colon left out),
// "{token=S3cret}" or "{token S3cret}" is the one key "token:S3cret" to
// YAML, whose error must not print the secret.
func joinKey(parent, name string) string {
	if i := strings.IndexAny(name, keyCuts); i >= 0 {
		name = name[:i] + name[i:i+1] + "…"
	}
	if strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		name = strconv.Quote(name)
	}
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// parentKey strips the last ".name" or "[i]" from key; "" is the root.
func parentKey(key string) string {
	if strings.HasSuffix(key, "]") {
		if i := strings.LastIndexByte(key, '['); i >= 0 {
			return key[:i]
		}
	}
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}

// suggest returns "; did you mean X?" for the known name closest to an
// unknown one (case, "_" and "-" ignored, or at most two edits away), else
// the list of known names.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	best, bestDist := "", 3
	for _, k := range known {
		dist := editDistance(norm(name), norm(k))
		if dist < bestDist && (dist == 0 || len(name) > 3) {
			best, bestDist = k, dist
		}
	}
	if best == "" {
		return "; expected one of: " + strings.Join(known, ", ")
	}
	return fmt.Sprintf("; did you mean %s?", best)
}

// editDistance is the Levenshtein distance, for short key names only.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// nameEntries gives each error about an entry of sources or endpoints the
// entry's id, when the file gave it a valid one.
func (d *decoder) nameEntries(cfg *Config) {
	ids := map[string]string{}
	name := func(list string, i int, id string) {
		key := fmt.Sprintf("%s[%d]", list, i)
		if IDPattern.MatchString(id) && !d.bad[key+".id"] && !d.bad[key] {
			ids[key] = id
		}
	}
	for i, s := range cfg.Sources {
		name("sources", i, s.ID)
	}
	for i, e := range cfg.Endpoints {
		name("endpoints", i, e.ID)
	}
	for i := range d.errs {
		e := &d.errs[i]
		if end := strings.IndexByte(e.Key, ']'); end > 0 {
			e.ID = ids[e.Key[:end+1]]
		}
	}
}
