// Command slotproxy is a MySQL wire-protocol proxy.
//
// Usage:
//
//	slotproxy serve --config FILE [--listen HOST:PORT] [--backend HOST:PORT] [--metrics HOST:PORT]
//	slotproxy migrate --config FILE [--backend HOST:PORT]
//	slotproxy explain --config FILE [--backend HOST:PORT] [--db NAME] SQL
//	slotproxy rollup --config FILE [--backend HOST:PORT] [--once] [--all]
//	slotproxy check --config FILE [--backend HOST:PORT]
//	slotproxy uninstall --config FILE [--backend HOST:PORT] [--yes]
//	slotproxy health [--config FILE] [--metrics HOST:PORT] [--live]
//	slotproxy version
//	slotproxy help [COMMAND]
//
// Each command parses its own flags, which come right after the command's
// name. Errors are printed on stderr as one line, "slotproxy: MESSAGE". The
// exit status is 0 on success (including a clean shutdown on SIGTERM or
// SIGINT), 2 when the command line is wrong and 1 for any other error
// (for check: problems found).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is a subcommand. Its run function receives the arguments after
// the command's name and parses them with its own flag.FlagSet (see
// newFlagSet and parseFlags).
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// commands returns the subcommands in the order "help" lists them. It is a
// function, not a variable, because help refers back to it.
func commands() []command {
	return []command{
		{"serve", "run the proxy", runServe},
		{"migrate", "create the slot tables and register record types", runMigrate},
		{"explain", "show how a statement would be rewritten", runExplain},
		{"rollup", "fold slot rows into their base rows", runRollup},
		{"check", "validate the configuration and rules against the live schema", runCheck},
		{"advise", "find hot counters in a database and write candidate rules", runAdvise},
		{"uninstall", "fold every slot row and drop the slot tables (take slotproxy out)", runUninstall},
		{"health", "ask a running serve whether it is ready (for images without curl)", runHealth},
		{"version", "print the version", runVersion},
		{"help", "show help for slotproxy or one of its commands", runHelp},
	}
}

// lookup returns the subcommand called name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run runs the command line args (without the program name) and returns the
// exit status. It is the only place that prints errors.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		printError(stderr, err)
		return 2
	default:
		printError(stderr, err)
		return 1
	}
}

// dispatch runs the subcommand named by args[0].
func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given (run \"slotproxy help\")")
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	}
	c, ok := lookup(name)
	if !ok {
		return usagef("unknown command %q (run \"slotproxy help\")", name)
	}
	return c.run(args[1:], stdout, stderr)
}

// printError writes err to w as a single line prefixed with "slotproxy: ".
func printError(w io.Writer, err error) {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
	fmt.Fprintf(w, "slotproxy: %s\n", msg)
}

// printWarning writes err to w as a single line prefixed with
// "slotproxy: warning: ", for problems that do not fail a command.
func printWarning(w io.Writer, err error) {
	printError(w, fmt.Errorf("warning: %w", err))
}

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef formats a usageError; like fmt.Errorf, it supports %w.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newFlagSet returns an empty flag set for the subcommand name that reports
// parse errors instead of printing them. synopsis (the arguments after
// "slotproxy NAME") and doc make up the command's help text.
func newFlagSet(name, synopsis, doc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: slotproxy %s %s\n\n%s\n", name, synopsis, doc)
		if hasFlags(fs) {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// hasFlags reports whether fs defines any flag.
func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args with fs. For -h or --help it prints the command's
// help to stdout and returns flag.ErrHelp, which run treats as success; any
// other failure is a usageError.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return err
	default:
		return usagef("%s: %w (run \"slotproxy help %s\")", fs.Name(), err, fs.Name())
	}
}

// noArgs rejects positional arguments left after the flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// runHelp implements "slotproxy help [COMMAND]".
func runHelp(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("help", "[COMMAND]", "Show the commands, or the flags of COMMAND.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		fmt.Fprintf(stdout, "slotproxy is a MySQL wire-protocol proxy.\n\nUsage: slotproxy COMMAND [FLAGS]\n\nCommands:\n")
		for _, c := range commands() {
			fmt.Fprintf(stdout, "  %-9s %s\n", c.name, c.summary)
		}
		fmt.Fprintf(stdout, "\nRun \"slotproxy help COMMAND\" for the flags of a command.\n")
		return nil
	case 1:
		c, ok := lookup(fs.Arg(0))
		if !ok {
			return usagef("help: unknown command %q", fs.Arg(0))
		}
		// Every command answers -h with its help on stdout.
		return c.run([]string{"-h"}, stdout, io.Discard)
	default:
		return usagef("help: unexpected argument %q", fs.Arg(1))
	}
}
