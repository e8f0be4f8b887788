//go:build !linux

package kubetest

import (
	"os"
	"syscall"
)

// childAttr: no parent-death signal off Linux.
func childAttr() *syscall.SysProcAttr { return nil }

// terminate stops p; off Linux there is no SIGTERM to ask with.
func terminate(p *os.Process) error { return p.Kill() }
