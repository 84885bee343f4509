package main

import (
	"context"
	"fmt"
	"sync/atomic"
)

// runSlotStudy runs hot-tx (slotproxy only, --clients, --hold) and
// counter-read (slotproxy against the base column via the relay) for each
// slot count of --study-slots. For every value the rule is re-created with
// that many slots (new rewriter), the hot row's slot rows are folded into
// its base column so that its increments start without slot rows, and every counter-read id
// gets that many live slot rows: the read cost of a fully spread counter.
// The slot counts run one after the other, so machine noise does not
// cancel across them as it does within a workload.
func (b *bench) runSlotStudy(ctx context.Context) error {
	before := b.srv.Stats()
	defer func() { b.rep.addProxyStats("slot-study", before, b.srv.Stats()) }()
	orig := b.srv.Rewriter()
	defer b.srv.SetRewriter(orig)

	var committed atomic.Int64
	return b.counterCheck(ctx, "slot-study", &committed, false, func() error {
		for _, slots := range b.opts.studySlots {
			rw, err := b.loadRewriter(ctx, slots, false)
			if err != nil {
				return err
			}
			if got := rw.Catalog().Tables()[0].Slots; got != slots {
				return fmt.Errorf("rule with %d slots loaded as %d", slots, got)
			}
			b.srv.SetRewriter(rw)
			if err := b.foldSlots(ctx, hotID); err != nil {
				return err
			}
			tx, err := b.runScenario(ctx, b.hotTxScenario(b.opts.clients, &committed, "slotproxy"))
			if err != nil {
				return err
			}
			reads, err := b.counterReadAt(ctx, slots, false)
			if err != nil {
				return err
			}
			row := &studyRow{Slots: slots, SlotRowsPerKey: slots}
			for _, r := range append(tx, reads...) {
				r.Slots = slots
				row.OtherCores = max(row.OtherCores, r.OtherCores)
				b.rep.StudyRuns = append(b.rep.StudyRuns, r)
				switch {
				case r.Workload == wHotTx:
					row.HotTxRate, row.HotTxP50Ms, row.HotTxP99Ms = r.Rate, r.P50Ms, r.P99Ms
					row.HotTxRetries, row.HotTxErrors = r.Retries, r.Errors
				case r.Target == "slotproxy":
					row.ReadRate, row.ReadP99Ms = r.Rate, r.P99Ms
				default:
					row.BaseReadRate = r.Rate
				}
			}
			row.ReadRatio = ratio(row.ReadRate, row.BaseReadRate)
			b.rep.SlotStudy = append(b.rep.SlotStudy, row)
		}
		return nil
	})
}
