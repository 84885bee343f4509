package rules

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
)

// Error is one problem with one rule. Its text has the form
//
//	FILE:LINE: MESSAGE
//
// where FILE is the file the rule came from (as named to Parse, or joined
// onto the directory given to LoadDir) and LINE is 1-based. MESSAGE starts
// with the rule file key it concerns, as in
//
//	rules/repos.yaml:3: counters: "id" is the key column, it cannot also be a counter
//
// except for problems with the file as a whole (YAML syntax, not a mapping,
// an unknown or missing key). Line is 0 when no line applies: a file that
// cannot be read, or a Rule built by hand without lines and given to
// NewSet; File is empty for a hand-built Rule without a File. Error leaves
// out whatever part is unknown.
type Error struct {
	// File is the file the problem is in.
	File string
	// Line is the 1-based line of the problem, 0 if none applies.
	Line int
	// Msg describes the problem, without the location.
	Msg string

	err error // underlying error, such as an *fs.PathError's cause
}

// Error returns "File:Line: Msg", leaving out File or Line when unknown.
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
	default:
		return e.Msg
	}
}

// Unwrap returns the underlying error, if any: for a file LoadDir could not
// read, the operating system's error (so errors.Is(err, fs.ErrPermission)
// works); nil otherwise.
func (e *Error) Unwrap() error { return e.err }

// Errors returns every *Error in err's tree, in order: err itself if it is
// one, or the members of an errors.Join, looking through wrapping errors. It is a convenience for callers
// that want to inspect each problem that Parse, NewSet or LoadDir reported.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *Error:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, sub := range e.Unwrap() {
				walk(sub)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// join returns nil for no problems, the *Error itself for one, and
// errors.Join of them all, one per line, for several.
func join(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// sortErrors orders errs by file, then line; problems on the same line keep
// the order in which they were found.
func sortErrors(errs []*Error) {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}
