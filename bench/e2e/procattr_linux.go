package main

import "syscall"

// ownProcessGroup puts a child in a process group of its own, so that a
// Ctrl-C at the terminal reaches the harness and not the child.
func ownProcessGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
