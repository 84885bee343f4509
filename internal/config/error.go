package config

import (
	"github.com/slotproxy/slotproxy/internal/yamlkeys"
	"strconv"
	"strings"
)

// Error is a configuration problem. Its message has the form
//
//	FILE:LINE: KEY: PROBLEM
//
// where each of FILE, LINE and KEY is left out when unknown or not
// applicable (Validate knows no file; a YAML syntax error has no key).
type Error struct {
	// File is the configuration file as named to Load; empty for Validate.
	File string
	// Line is the 1-based line of the offending key or value; 0 if unknown.
	Line int
	// Key is the dotted path of the offending key, such as
	// "backend.tls.mode", or of the mapping holding an unknown key; empty
	// for problems with the file as a whole.
	Key string
	// Err is the problem itself.
	Err error
}

// Error formats e; it is the only place that formats a location.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// source locates keys in the file being loaded. The zero value stands for
// no file (Validate): its errors carry only a key.
type source struct {
	file  string
	lines map[string]int // dotted key → line of the key
}

// err returns an *Error about key, placed on the line where key was found.
func (s *source) err(key string, err error) error {
	return s.errAt(s.lines[key], key, err)
}

// errAt returns an *Error about key, placed on line.
func (s *source) errAt(line int, key string, err error) error {
	return &Error{File: s.file, Line: line, Key: key, Err: err}
}

// syntaxError turns a yaml.v3 decoding error into an *Error with a 1-based
// line. yaml.v3 leaves out "line N: " when N would be 1 (its marks are
// 0-based and 0 means unknown), so a missing line means the first one,
// except for errors about aliases, which carry no position at all.
func (s *source) syntaxError(err error) error {
	line, problem, ok := yamlkeys.Syntax(err)
	if !ok {
		return s.errAt(0, "", err)
	}
	if line == 0 && !strings.HasPrefix(problem, "unknown anchor") {
		line = 1
	}
	return s.errAt(line, "", &yamlSyntaxError{problem: problem, err: err})
}

// yamlSyntaxError is a YAML syntax problem without yaml.v3's position
// prefix, which Error.Error replaces with FILE:LINE.
type yamlSyntaxError struct {
	problem string
	err     error
}

func (e *yamlSyntaxError) Error() string { return "invalid YAML: " + e.problem }
func (e *yamlSyntaxError) Unwrap() error { return e.err }
