package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slotproxy/slotproxy/internal/advise"
)

// adviseDSNEnv is the environment variable that supplies --dsn.
const adviseDSNEnv = "SLOTPROXY_ADVISE_DSN"

// runAdvise implements "slotproxy advise": read a server's evidence of hot
// counter rows and write candidate rule files.
func runAdvise(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("advise", "--dsn DSN [--out DIR] [--min-calls N] [--watch DURATION] [--force]",
		"Find hot counters in a running MySQL 8 or MariaDB server and write a\n"+
			"candidate rule file for each, <out>/<schema>.<table>.yaml, with the evidence\n"+
			"as comments. The evidence is the server's own: statement digests from\n"+
			"performance_schema (MariaDB needs performance_schema=ON), live prepared\n"+
			"statements (MariaDB), and the row-lock waits sampled for --watch. Every\n"+
			"UPDATE that increments columns (c = c + ?) of one row by one column is\n"+
			"grouped by table; a table qualifies if its WHERE column is its single-column\n"+
			"integer primary key and the counters are integer columns. The others are\n"+
			"listed as unsuitable, with the reason. Existing files are kept unless\n"+
			"--force. Nothing is changed on the server.\n\n"+
			"DSN is in Go MySQL driver form, user:password@tcp(host:port)/, and defaults\n"+
			"to $"+adviseDSNEnv+". The account needs SELECT on performance_schema and\n"+
			"the PROCESS privilege.")
	dsn := fs.String("dsn", os.Getenv(adviseDSNEnv), "the server to read, as `DSN` (default $"+adviseDSNEnv+")")
	out := fs.String("out", advise.DefaultOut, "write the rule files to `DIR`")
	minCalls := fs.Int64("min-calls", 100, "ignore tables with fewer than `N` increments, unless lock waits were seen on them")
	watch := fs.Duration("watch", 5*time.Second, "sample lock waits for `DURATION`")
	force := fs.Bool("force", false, "overwrite existing rule files")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *dsn == "" {
		return usagef("advise: no --dsn given and $%s is not set", adviseDSNEnv)
	}
	if *minCalls < 0 {
		return usagef("advise: --min-calls must not be negative")
	}
	if *watch < 0 {
		return usagef("advise: --watch must not be negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	_, err := advise.Run(ctx, advise.Options{
		DSN: *dsn, Out: *out, MinCalls: *minCalls, Watch: *watch, Force: *force,
	}, stdout)
	return err
}
