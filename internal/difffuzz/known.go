package difffuzz

// Exclusion is what the bounded run leaves out because it hits a
// difference that is reported and not yet fixed: a statement class, or
// (Class "") a feature of Config. Reproducer is that difference, as
// Reproducer prints it, shortened; remove the entry once it is fixed.
type Exclusion struct {
	Class Class
	// Feature names the Config switch turned off when Class is "".
	Feature    string
	Reproducer string
}

// Features of Config that an Exclusion can turn off.
const (
	FeatureInterleave    = "interleave"      // Config.Interleave
	FeatureIsolationInTx = "isolation-in-tx" // Config.IsolationInTx
	FeatureRepeatWarning = "repeat-warnings" // Config.RepeatWarnings
)

// KnownDifferences are what TestDiffFuzz's bounded run excludes
// (DIFFFUZZ_ALL=1 runs everything).
var KnownDifferences = []Exclusion{
	{
		// Interleaved transactions still find differences in how
		// concurrent work is ordered, each in testdata/known (not run:
		// they differ): an autocommit statement the server ended in a
		// deadlock that forms directly too, which the proxy runs again
		// (mariadb-1795793446303068327); a read through a view holds no
		// metadata lock on the view through the proxy, which reads the
		// view's table (mysql-1795793447234879772); a DDL statement
		// that slips in between an autocommit increment's slotted
		// attempt and its run on the base row (mysql-1795793447234879774);
		// and one not yet shrunk past a TRUNCATE among 18 steps
		// (mysql-1795793447234879752). Long runs (DIFFFUZZ_ALL=1) keep
		// interleaving on; every other difference they found is fixed
		// (testdata/reproducers) or documented (testdata/documented).
		Feature: FeatureInterleave,
		Reproducer: "-- steps (4 connection pairs):\n  1 [c2] START TRANSACTION\n  2 [c2] SELECT SUM(c1) FROM v_t2\n" +
			"  3 [c3] CREATE OR REPLACE VIEW v_t2 AS SELECT id, c1 FROM t2\n" +
			"-- difference (blocked) at step 3\n   direct: (blocked, then) ERR 1205\n   proxy:  OK",
	},
}

// Excluded is the classes KnownDifferences turns off.
func Excluded() []Class {
	var out []Class
	for _, e := range KnownDifferences {
		if e.Class != "" {
			out = append(out, e.Class)
		}
	}
	return out
}

// Bounded is cfg without what KnownDifferences excludes.
func Bounded(cfg Config) Config {
	cfg = cfg.Without(Excluded()...)
	for _, e := range KnownDifferences {
		switch e.Feature {
		case FeatureInterleave:
			cfg.Interleave = false
		case FeatureIsolationInTx:
			cfg.IsolationInTx = false
		case FeatureRepeatWarning:
			cfg.RepeatWarnings = false
		}
	}
	return cfg
}
