package testdb

import "syscall"

// childSysProcAttr puts the server in its own process group (terminal signals
// aimed at the test run do not reach it; testdb shuts it down) and has the
// kernel SIGKILL it if the test binary dies without stopping it.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// chrootSysProcAttr is childSysProcAttr for a child that runs chrooted
// into root.
func chrootSysProcAttr(root string) *syscall.SysProcAttr {
	a := childSysProcAttr()
	a.Chroot = root
	return a
}
