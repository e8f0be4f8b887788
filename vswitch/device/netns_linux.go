package device

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNetNS runs fn on an OS thread that has entered the network namespace
// at path ("" runs fn where the caller is), so that the sockets and
// devices fn opens belong to that namespace; they stay there afterwards.
// The thread goes back to the namespace it came from, or, if it cannot,
// ends with its goroutine so that no other goroutine runs in the wrong
// namespace.
func InNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: this thread's namespace: %w", err)
			return
		}
		defer self.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns %s: enter: %w", path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(self); err == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with the goroutine
		done <- ferr
	}()
	return <-done
}
