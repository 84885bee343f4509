package main

import (
	"errors"
	"io"
)

// runAdvise implements "slotproxy advise" (being written).
func runAdvise(args []string, stdout, stderr io.Writer) error {
	return errors.New("advise: not implemented yet")
}
