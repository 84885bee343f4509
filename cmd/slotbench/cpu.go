package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The machine may be shared. To tell a slow round from a busy machine,
// each round records how much CPU went to processes other than this one
// (the load generator and the servers under test) and the backend's
// mariadbd: the "other" column, in cores. Linux only; zero elsewhere.

// clockTicks is USER_HZ, which is 100 on every Linux architecture Go
// supports.
const clockTicks = 100

// cpuSample is a snapshot of CPU time counters, in clock ticks.
type cpuSample struct {
	busy    int64 // all CPUs: user+nice+system (interrupt time is left out: loopback traffic's softirqs are ours)
	steal   int64
	self    int64 // this process: utime+stime
	backend int64 // mariadbd, when it runs on this machine and we know its pid
	target  int64 // the process serving the target, when it is one of its own (--slotproxy)
	ok      bool
}

// sampleCPU reads the counters; a pid of 0 means unknown (or none).
func sampleCPU(backendPID, targetPID int) cpuSample {
	var s cpuSample
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal
	s.busy = v[0] + v[1] + v[2]
	s.steal = v[7]
	s.self = procTicks(os.Getpid())
	if backendPID > 0 {
		s.backend = procTicks(backendPID)
	}
	if targetPID > 0 {
		s.target = procTicks(targetPID)
	}
	s.ok = true
	return s
}

// procTicks returns utime+stime of pid from /proc/PID/stat (0 if unknown).
func procTicks(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may contain spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// otherCores returns the average number of cores that processes other than
// this one, the backend and the target's kept busy between a and b, and the average
// number of cores stolen by the hypervisor, over seconds of wall time.
func otherCores(a, b cpuSample, seconds float64) (other, steal float64) {
	if !a.ok || !b.ok || seconds <= 0 {
		return 0, 0
	}
	foreign := (b.busy - a.busy) - (b.self - a.self) - (b.backend - a.backend) - (b.target - a.target)
	return max(float64(foreign), 0) / clockTicks / seconds, float64(b.steal-a.steal) / clockTicks / seconds
}

// findPID returns the pid of a process whose command line contains every
// one of parts, or 0.
func findPID(parts ...string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		match := true
		for _, p := range parts {
			match = match && strings.Contains(cmd, p)
		}
		if match {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	return 0
}
