package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/slotproxy/slotproxy/rewrite"
)

// runExplain implements "slotproxy explain": it prints how the proxy would
// rewrite a statement.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("explain", "--config FILE [--backend HOST:PORT] [--db NAME] SQL",
		"Print what the proxy would send for SQL: the rewritten statement, or\n"+
			"\"pass-through: REASON\" when it would be sent unchanged. The rules are\n"+
			"loaded and checked against the schema as serve does, through the admin\n"+
			"account; nothing is executed. The flags come before SQL.")
	configPath := fs.String("config", "", "the configuration `FILE` (YAML), which must set rules")
	fs.String("backend", "", "the MySQL server at `HOST:PORT` (overrides backend.address)")
	db := fs.String("db", "", "the client's current database `NAME` (default: the rules' schema, when they all share one)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		return usagef("explain: no SQL given (run \"slotproxy help explain\")")
	case 1:
	default:
		return usagef("explain: unexpected argument %q (quote the SQL as one argument; flags go before it)", fs.Arg(1))
	}
	cfg, set, err := adminConfig("explain", *configPath, flagValue(fs, "backend"))
	if err != nil {
		return err
	}
	if flagValue(fs, "db") == nil {
		schemas := map[string]bool{}
		for _, r := range set.Rules() {
			schemas[r.Schema] = true
			*db = r.Schema
		}
		if len(schemas) != 1 {
			*db = ""
		}
	}
	rw, _, err := loadRewriter(context.Background(), cfg, set, slog.New(slog.NewTextHandler(stderr, nil)), false)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, rewrite.Explain(rw.Rewrite(fs.Arg(0), rewrite.Session{DB: *db})))
	return nil
}
