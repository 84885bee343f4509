package proxy

import "github.com/slotproxy/slotproxy/executor"

// SetSlotReader sets the reader of committed slot rows that folds inside
// clients' REPEATABLE READ transactions use (executor.SlotReader: without
// one, those folds lock the records' slot rows by range, gaps included, and
// increments of neighbouring records wait for them). Call it before Serve.
func (s *Server) SetSlotReader(r executor.SlotReader) { s.env.SlotReader = r }
