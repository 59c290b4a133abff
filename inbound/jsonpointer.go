package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
)

// parsePointer splits an RFC 6901 JSON pointer into its unescaped reference tokens ("~1" is "/",
// "~0" is "~"). "" is the whole document and gives no tokens.
func parsePointer(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if ptr[0] != '/' {
		return nil, errors.New(`JSON pointer must start with "/"`)
	}
	toks := strings.Split(ptr[1:], "/")
	for i, t := range toks {
		u, err := unescapeToken(t)
		if err != nil {
			return nil, err
		}
		toks[i] = u
	}
	return toks, nil
}

// unescapeToken decodes "~0" and "~1"; any other "~" is an error.
func unescapeToken(t string) (string, error) {
	if strings.IndexByte(t, '~') < 0 {
		return t, nil
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '~' {
			b.WriteByte(t[i])
			continue
		}
		if i+1 == len(t) || (t[i+1] != '0' && t[i+1] != '1') {
			return "", errors.New(`JSON pointer has "~" not followed by 0 or 1`)
		}
		b.WriteByte("~/"[t[i+1]-'0'])
		i++
	}
	return b.String(), nil
}

// The pointer walk below reads the body in place instead of decoding it: on the ingest hot path a
// decode into map[string]any costs tens of allocations per request, while the walk allocates only
// the returned string. It relies on the document being valid JSON (checked once per
// Request), so it only has to find boundaries, never to report syntax errors; every index is still
// bounds-checked so that a caller's mistake cannot turn into a panic.

// pointerValue returns the value the reference tokens point to in the valid JSON document doc, as
// an event ID or type sees it: a string's value, a number's literal text, "true" or "false". Null,
// objects, arrays and missing members yield nothing. Like encoding/json, the last of duplicate
// object members wins.
func pointerValue(doc []byte, toks []string) (string, bool) {
	i := skipSpace(doc, 0)
	for _, tok := range toks {
		var ok bool
		switch at(doc, i) {
		case '{':
			i, ok = findMember(doc, i, tok)
		case '[':
			i, ok = findElement(doc, i, tok)
		}
		if !ok {
			return "", false
		}
	}
	return scalarText(doc[i:skipValue(doc, i)])
}

// scalarText converts one raw JSON value to its text; see pointerValue.
func scalarText(raw []byte) (string, bool) {
	switch at(raw, 0) {
	case '"':
		return decodeString(raw), true
	case 't':
		return "true", true
	case 'f':
		return "false", true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return string(raw), true
	}
	return "", false // null, object, array
}

// findMember returns the start of the value of the last member named key in the object at doc[i].
func findMember(doc []byte, i int, key string) (int, bool) {
	found, ok := 0, false
	i = skipSpace(doc, i+1)
	for at(doc, i) == '"' {
		end := skipString(doc, i)
		name := doc[i:end]
		i = skipSpace(doc, end)
		if at(doc, i) != ':' {
			return 0, false
		}
		i = skipSpace(doc, i+1)
		if nameIs(name, key) {
			found, ok = i, true
		}
		i = skipSpace(doc, skipValue(doc, i))
		if at(doc, i) != ',' {
			break
		}
		i = skipSpace(doc, i+1)
	}
	return found, ok
}

// findElement returns the start of the element the RFC 6901 array index tok names in the array at
// doc[i]. Only "0" and digits without a leading zero are indexes; "-" (past the end) yields nothing.
func findElement(doc []byte, i int, tok string) (int, bool) {
	n, ok := arrayIndex(tok)
	if !ok {
		return 0, false
	}
	i = skipSpace(doc, i+1)
	if at(doc, i) == ']' {
		return 0, false
	}
	for ; n > 0; n-- {
		i = skipSpace(doc, skipValue(doc, i))
		if at(doc, i) != ',' {
			return 0, false
		}
		i = skipSpace(doc, i+1)
	}
	return i, i < len(doc)
}

// arrayIndex parses an RFC 6901 array index; indexes too large for any body are refused.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}

// nameIs reports whether the raw JSON string name (quotes included) decodes to key. Plain ASCII and
// valid UTF-8 without escapes compare in place; anything else is decoded exactly as encoding/json
// would (escapes, invalid UTF-8 replaced by U+FFFD).
func nameIs(name []byte, key string) bool {
	if !quoted(name) {
		return false
	}
	inner := name[1 : len(name)-1]
	if !needsDecode(inner) {
		return string(inner) == key
	}
	return decodeString(name) == key
}

// decodeString returns the value of the raw JSON string s, quotes included.
func decodeString(s []byte) string {
	if !quoted(s) {
		return "" // unreachable on a valid document
	}
	inner := s[1 : len(s)-1]
	if !needsDecode(inner) {
		return string(inner)
	}
	var v string
	if json.Unmarshal(s, &v) != nil {
		return "" // unreachable on a valid document
	}
	return v
}

// quoted reports whether s is long enough to be a raw JSON string with both quotes.
func quoted(s []byte) bool { return len(s) >= 2 && s[len(s)-1] == '"' }

// needsDecode reports whether a string's raw contents differ from its value:
// an escape anywhere, or invalid UTF-8. (In an earlier version, it looked only at the
// first byte that was an escape or non-ASCII, so "café\u0026" kept its escape.)
func needsDecode(inner []byte) bool {
	return bytes.IndexByte(inner, '\\') >= 0 || !utf8.Valid(inner)
}

// maxJSONDepth is encoding/json's nesting limit: a deeper document is not
// valid JSON to it.
const maxJSONDepth = 10000

// tooDeep reports whether doc nests arrays and objects deeper than
// maxJSONDepth. It runs before gjson's validator, which recurses without a
// bound: 1 MiB of "[" cost it ~64 MB of stack and a quarter of a second.
func tooDeep(doc []byte) bool {
	// Cheap first: so deep a document needs that many openings.
	if len(doc) <= maxJSONDepth || bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) <= maxJSONDepth {
		return false
	}
	depth, inString := 0, false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// skipValue returns the index just past the value starting at doc[i].
func skipValue(doc []byte, i int) int {
	switch at(doc, i) {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		return skipContainer(doc, i)
	}
	for i < len(doc) {
		switch doc[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipString returns the index just past the string whose opening quote is doc[i].
func skipString(doc []byte, i int) int {
	for i++; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(doc)
}

// skipContainer returns the index just past the object or array opening at doc[i].
func skipContainer(doc []byte, i int) int {
	depth := 0
	for i < len(doc) {
		switch doc[i] {
		case '"':
			i = skipString(doc, i)
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(doc)
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(doc []byte, i int) int {
	for i < len(doc) {
		switch doc[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// at returns doc[i], or 0 past the end, so the walk needs no separate bounds checks.
func at(doc []byte, i int) byte {
	if i < len(doc) {
		return doc[i]
	}
	return 0
}
