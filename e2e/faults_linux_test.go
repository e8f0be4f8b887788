package e2e

import (
	"errors"
	"testing"
	"time"
)

// TestUfpdFaults breaks things under a running ufpd and checks that each
// fault is logged and that ufpd keeps serving every other port: a pod's
// namespace deleted (its TAP goes with it), a pod's TAP deleted from
// outside, and the uplink's link going down and up again (traffic over
// it works again once it is up).
func TestUfpdFaults(t *testing.T) {
	l := newLab(t, "ping")
	a, b, c, d := onePod{"pod-a", 0x10}, onePod{"pod-b", 0x11}, onePod{"pod-c", 0x12}, onePod{"pod-d", 0x13}
	o := l.newOneNode([]onePod{a, b, c, d}, nil)
	nsA, nsB := o.pods[a.name], o.pods[b.name]
	l.tcpSink(o.ext, ":7000")
	l.udpResponder(o.ext, ":7001", "ext")
	for _, dst := range []string{b.ip4(), c.ip4(), d.ip4(), oneExtIP} {
		if err := l.waitPing(nsA, dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// alive checks that pod-a and pod-b still reach each other.
	alive := func(t *testing.T) {
		t.Helper()
		if err := l.ping(nsA, b.ip4(), 3); err != nil {
			t.Errorf("after the fault: %v", err)
		}
		if err := l.ping(nsB, a.ip6(), 3); err != nil {
			t.Errorf("after the fault: %v", err)
		}
	}

	t.Run("pod-namespace-deleted", func(t *testing.T) {
		l := l.in(t)
		m := o.u.mark()
		l.ip("netns", "del", o.pods[c.name])
		t.Log(o.u.waitLog(t, m, 5*time.Second, "port device failed", "port="+c.name))
		alive(t)
	})
	t.Run("pod-tap-deleted", func(t *testing.T) {
		l := l.in(t)
		m := o.u.mark()
		l.ip("-n", o.pods[d.name], "link", "del", "eth0")
		t.Log(o.u.waitLog(t, m, 5*time.Second, "port device failed", "port="+d.name))
		alive(t)
	})
	t.Run("uplink-down-and-up", func(t *testing.T) {
		l := l.in(t)
		m := o.u.mark()
		l.ip("-n", o.node, "link", "set", "eth0", "down")
		if err := l.ping(nsA, oneExtIP, 2); err == nil {
			t.Errorf("pod-a reaches the outside host with the uplink down")
		}
		alive(t)
		down, downErr := o.u.findLog(m, time.Second, "port=uplink")
		m = o.u.mark()
		l.ip("-n", o.node, "link", "set", "eth0", "up")
		if err := l.waitPing(nsA, oneExtIP, 5*time.Second); err != nil {
			t.Fatalf("the uplink is up again: %v", err)
		}
		if err := checkFlow(nsA, oneExtIP, oneNodeIP); err != nil {
			t.Errorf("the uplink is up again: %v", err)
		}
		alive(t)
		up, upErr := o.u.findLog(m, time.Second, "port=uplink")
		if err := errors.Join(downErr, upErr); err != nil {
			t.Errorf("the uplink going down and up again is not logged: %v", err)
		}
		t.Logf("logged:\n%s\n%s", down, up)
	})
	// The TAPs gone with their namespace or by hand left ufpd's other
	// devices as they were: stopping it removes the rest (checked by
	// stop).
}
