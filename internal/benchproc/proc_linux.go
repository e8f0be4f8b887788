package benchproc

import "syscall"

// childAttr has the kernel kill a child if the harness dies without
// stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
