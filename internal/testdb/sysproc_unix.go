//go:build unix && !linux

package testdb

import "syscall"

// childSysProcAttr puts mariadbd in its own process group. Without
// Pdeathsig (Linux only) a server can outlive a test binary that is killed.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
