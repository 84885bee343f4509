//go:build unix && !linux

package testdb

import "syscall"

// childSysProcAttr puts the server in its own process group. Without
// Pdeathsig (Linux only) a server can outlive a test binary that is killed.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// chrootSysProcAttr is childSysProcAttr for a child that runs chrooted
// into root.
func chrootSysProcAttr(root string) *syscall.SysProcAttr {
	a := childSysProcAttr()
	a.Chroot = root
	return a
}
