package kubetest

import (
	"os"
	"syscall"
)

// childAttr has the kernel kill a child if the test binary dies without
// stopping it, so no etcd or kube-apiserver outlives its test.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// terminate asks p to stop (SIGTERM).
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
