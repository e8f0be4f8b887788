package main

import (
	"os"
	"syscall"
)

// ownProcessGroup puts a child in a process group of its own, so that a
// Ctrl-C at the terminal reaches the harness and not the child.
func ownProcessGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// stopProcess stops p with SIGSTOP.
func stopProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// continueProcess continues p with SIGCONT.
func continueProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
