package vswitch

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU returns the CPU time the process has used so far, all its
// threads (the garbage collector's too), from the kernel's scheduler
// accounting (CLOCK_PROCESS_CPUTIME_ID), and whether it could read it.
// Benchmarks report it per operation beside ns/op: on a machine whose
// other processes take turns on the CPUs, wall time counts the turns this
// process waited for, CPU time only what it ran.
func processCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
