package difffuzz

// Exclusion is a statement class the bounded run leaves out because it hits
// a difference that is reported and not yet fixed. Reproducer is that
// difference (see Reproducer); remove the entry once it is fixed.
type Exclusion struct {
	Class      Class
	Reproducer string
}

// KnownDifferences are the classes TestDiffFuzz's bounded run excludes
// (DIFFFUZZ_ALL=1 runs them too).
var KnownDifferences = []Exclusion{}

// Excluded is the classes of KnownDifferences.
func Excluded() []Class {
	var out []Class
	for _, e := range KnownDifferences {
		out = append(out, e.Class)
	}
	return out
}
