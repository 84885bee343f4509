package main

import (
	"math/bits"
	"time"
)

// hist is a latency histogram with HDR-like log-linear buckets: exact below
// 128ns, then 64 sub-buckets per power of two, so every bucket is narrower
// than 1/64 (1.6%) of its values. Recording never allocates, which matters
// here: the proxy under test runs in this process and shares its garbage
// collector with the load generator.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits                        // sub-buckets per power of two
	histLinear  = 2 * histSub                             // values below this have a bucket each
	histBuckets = histLinear + (63-histSubBits-1)*histSub // covers every positive time.Duration
)

// histIndex returns the bucket of d.
func histIndex(d time.Duration) int {
	ns := uint64(max(d, 0))
	if ns < histLinear {
		return int(ns)
	}
	e := bits.Len64(ns) - histSubBits - 1 // ns>>e is in [histSub, 2*histSub)
	return histLinear + (e-1)*histSub + int(ns>>e) - histSub
}

// histValue returns the middle of bucket i.
func histValue(i int) time.Duration {
	if i < histLinear {
		return time.Duration(i)
	}
	e := (i-histLinear)/histSub + 1
	m := uint64((i-histLinear)%histSub + histSub)
	lo := m << e
	return time.Duration(lo + (uint64(1)<<e)/2)
}

func (h *hist) record(d time.Duration) {
	h.counts[histIndex(d)]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q ≤ 1) of the recorded values, to
// the bucket's precision; 0 when nothing was recorded.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histValue(i), h.max)
		}
	}
	return h.max
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
