package config

import (
	"errors"
	"strings"
)

// errUnterminatedRef and errBadVarName are the two ways a ${…} reference can be
// malformed. Neither message quotes the scalar: it may be a secret.
var (
	errUnterminatedRef = errors.New("unterminated ${ reference (write $$ for a literal $)")
	errBadVarName      = errors.New("invalid ${…} reference: want ${NAME} or ${NAME:-default}, NAME made of letters, digits and _")
	errNestedRef       = errors.New("a ${NAME:-default} default cannot hold another ${…} reference (write $$ for a literal $)")
)

// expansion is the result of expanding one scalar.
type expansion struct {
	value string
	// unset names the variables that were referenced without a default and
	// are not set or empty, so an empty required value can say which one
	// to set.
	unset []string
}

// expandEnv replaces ${NAME} and ${NAME:-default} in s with values from
// lookup, and $$ with a literal $. Like the shell, the default applies when
// the variable is unset or empty. An unset or empty variable without a
// default expands to "" and is named in unset: the decoder reports it as an
// error of the key it is in (docker compose, Kubernetes and systemd set a
// variable to "" where it was meant to be absent: a tenant "${T}" must not
// become the operator's ""). A $ followed by anything else is kept as
// written. A default is taken literally, and one that holds "${" is an
// error (the shell's ${A:-${B}} would otherwise be the text "${B}", a
// token anyone reading the file knows). Expansion runs on parsed scalars, never on the raw file, so a
// value can never inject YAML structure.
func expandEnv(s string, lookup func(string) (string, bool)) (expansion, error) {
	if !strings.Contains(s, "$") {
		return expansion{value: s}, nil
	}
	var out expansion
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case s[i] != '$':
			b.WriteByte(s[i])
			i++
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i += 2
		case strings.HasPrefix(s[i:], "${"):
			n, err := expandRef(s[i+2:], lookup, &b, &out)
			if err != nil {
				return expansion{}, err
			}
			i += 2 + n
		default:
			b.WriteByte('$')
			i++
		}
	}
	out.value = b.String()
	return out, nil
}

// expandRef expands the reference whose body starts at rest (just after "${"),
// writes its value to b and returns how many bytes of rest it consumed.
func expandRef(rest string, lookup func(string) (string, bool), b *strings.Builder, out *expansion) (int, error) {
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return 0, errUnterminatedRef
	}
	name, def, hasDef := strings.Cut(rest[:end], ":-")
	if !validEnvName(name) {
		return 0, errBadVarName
	}
	if strings.Contains(def, "${") {
		return 0, errNestedRef
	}
	v, _ := lookup(name)
	switch {
	case hasDef && v == "":
		v = def
	case v == "":
		out.unset = append(out.unset, name)
	}
	b.WriteString(v)
	return end + 1, nil
}

// validEnvName reports whether name is a POSIX-style variable name.
func validEnvName(name string) bool {
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && !(c >= 'A' && c <= 'Z') && !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// noEnv is the lookup used when Parse is given none: every variable is unset.
func noEnv(string) (string, bool) { return "", false }
