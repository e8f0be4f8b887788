//go:build !linux

package benchproc

import "syscall"

// childAttr: the harness runs on Linux (it reads /proc); elsewhere it
// only builds.
func childAttr() *syscall.SysProcAttr { return nil }
