package rules

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest schema, table or column name MySQL allows, in
// characters.
const MaxNameLen = 64

// ident reads one identifier from the front of s as written in a rule file:
// either backquoted, where a doubled backquote stands for one, or unquoted,
// running to the first '.' or the end of s. An unquoted identifier may not contain a
// backquote or whitespace. It returns the identifier, the rest of s, and
// whether it was backquoted.
func ident(s string) (name, rest string, quoted bool, err error) {
	if !strings.HasPrefix(s, "`") {
		end := strings.IndexByte(s, '.')
		if end < 0 {
			end = len(s)
		}
		name = s[:end]
		if strings.Contains(name, "`") {
			return "", "", false, fmt.Errorf("name %q has a stray backquote; backquote a whole name, as in `my name`", name)
		}
		if strings.IndexFunc(name, unicode.IsSpace) >= 0 {
			return "", "", false, fmt.Errorf("name %q contains whitespace; backquote it if that is intended, as in `my name`", name)
		}
		return name, s[end:], false, nil
	}
	var b strings.Builder
	i := 1
	for {
		j := strings.IndexByte(s[i:], '`')
		if j < 0 {
			return "", "", true, fmt.Errorf("unterminated backquote in %q", s)
		}
		b.WriteString(s[i : i+j])
		i += j + 1
		if i < len(s) && s[i] == '`' { // `` is a literal backquote
			b.WriteByte('`')
			i++
			continue
		}
		return b.String(), s[i:], true, nil
	}
}

// splitTable splits the value of the table key, schema.table, into its two
// names. Either may be backquoted; an unquoted table name may not contain a
// '.', since "a.b.c" could mean `a.b`.c or a.`b.c`.
func splitTable(s string) (schema, table string, err error) {
	const want = "want schema.table, such as app.repos"
	schema, rest, quoted, err := ident(s)
	if err != nil {
		return "", "", err
	}
	if rest == "" {
		return "", "", fmt.Errorf("%q is not schema-qualified; %s", s, want)
	}
	if rest[0] != '.' {
		return "", "", fmt.Errorf("unexpected %q after the schema name in %q; %s", rest, s, want)
	}
	if schema == "" && !quoted {
		return "", "", fmt.Errorf("%q has no schema name before the '.'; %s", s, want)
	}
	table, rest, quoted, err = ident(rest[1:])
	if err != nil {
		return "", "", err
	}
	if rest != "" {
		if !quoted {
			return "", "", fmt.Errorf("%q has more than one '.'; backquote the name that contains a dot, as in `my.schema`.repos", s)
		}
		return "", "", fmt.Errorf("unexpected %q after the table name in %q; %s", rest, s, want)
	}
	if table == "" && !quoted {
		return "", "", fmt.Errorf("%q has no table name after the '.'; %s", s, want)
	}
	return schema, table, nil
}

// parseColumn reads a column name as written in a rule file: unquoted, or
// backquoted to allow a '.', whitespace or backquotes.
func parseColumn(s string) (string, error) {
	name, rest, quoted, err := ident(s)
	if err != nil {
		return "", err
	}
	if rest != "" {
		if !quoted {
			return "", fmt.Errorf("%q contains a '.'; write the bare column name (backquoted if the name itself contains a dot)", s)
		}
		return "", fmt.Errorf("unexpected %q after the column name in %q", rest, s)
	}
	return name, nil
}

// checkName reports whether name, a schema, table or column name (what
// says which), is one MySQL accepts: 1 to 64 characters of valid UTF-8 in
// the Basic Multilingual Plane, none of them NUL, not ending in a space.
func checkName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s %q is not valid UTF-8", what, name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL character", what, name)
	}
	for _, r := range name {
		if r > 0xFFFF {
			return fmt.Errorf("%s %q contains %U, which is outside the Basic Multilingual Plane; MySQL does not allow it in names", what, name, r)
		}
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return fmt.Errorf("%s %q is %d characters long; MySQL allows at most %d", what, name, n, MaxNameLen)
	}
	if strings.HasSuffix(name, " ") {
		return fmt.Errorf("%s %q ends with a space; MySQL does not allow that", what, name)
	}
	return nil
}

// quoteName returns name as a rule file would write it: unquoted when that
// reads back the same, backquoted otherwise.
func quoteName(name string) string {
	if name != "" && !strings.ContainsAny(name, ".`") && strings.IndexFunc(name, unicode.IsSpace) < 0 {
		return name
	}
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// fold is the case folding under which names match: Lookup, Counter and
// the duplicate checks compare fold(a) == fold(b).
func fold(s string) string { return strings.ToLower(s) }
