package kubetest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Shared is one cluster shared by the tests of a package, which saves
// each test the ~3 s of a start. The first Get starts it; Main stops it
// after the package's tests. A start that fails fails every Get with the
// same error rather than trying again. The zero value is ready to use;
// its methods are safe for concurrent use.
//
//	var cluster kubetest.Shared
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &cluster)) }
//
//	func TestX(t *testing.T) {
//		c := cluster.Get(t)
//		ns := c.Namespace(t)
//		...
//	}
type Shared struct {
	mu      sync.Mutex
	c       *Cluster
	err     error
	stopped bool
}

// Get returns the shared cluster, starting it on first use. It skips t if
// the binaries are missing (NeedAssets) and fails it if the cluster could
// not start or was stopped.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	NeedAssets(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		t.Fatal("kubetest: the shared cluster is stopped")
	}
	if s.c == nil && s.err == nil {
		s.c, s.err = start(AssetsDir())
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.c
}

// Stop stops the cluster if one was started; later Gets fail.
func (s *Shared) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.c == nil {
		return nil
	}
	return s.c.Stop()
}

// Main runs m's tests, then stops s's cluster, and returns the exit code
// for os.Exit (1 if the tests passed but the cluster did not stop
// cleanly).
func Main(m *testing.M, s *Shared) int {
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
