package kubetest

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// TestStop starts a cluster of its own and checks that Stop ends both
// processes and removes the directory.
func TestStop(t *testing.T) {
	c := Start(t)
	etcd, apiserver := c.PIDs()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{etcd, apiserver} {
		// The PIDs were reaped by Stop, so signal 0 finds no such
		// process (unless the PID was reused at once, which is
		// vanishingly unlikely right after).
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d after Stop: kill 0 = %v, want ESRCH", pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Stop: %v, want it gone", c.Dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
