package main

import (
	"errors"
	"io"
)

// runCheck implements "slotproxy check" (being written).
func runCheck(args []string, stdout, stderr io.Writer) error {
	return errors.New("check: not implemented yet")
}
