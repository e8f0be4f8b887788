//go:build !linux

package vswitch

import "time"

// processCPU reports false: the process's CPU time is read on Linux only
// (cputime_linux_test.go).
func processCPU() (time.Duration, bool) { return 0, false }
