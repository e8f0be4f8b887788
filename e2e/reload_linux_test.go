package e2e

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUfpdReload changes ufpd's configuration file under traffic: while a
// long TCP transfer runs between two pods the changes do not touch, a
// SIGHUP with a broken file and one with an invalid policy are logged as
// rejected and change nothing; a SIGHUP adding a pod (its TAP is made in
// its namespace and it is reachable) and removing another (its TAP is
// removed) is applied; the transfer completes with every byte. SIGTERM
// then removes every TAP ufpd made (checked by stop).
func TestUfpdReload(t *testing.T) {
	l := newLab(t, "ping")
	a, b, c, d := onePod{"pod-a", 0x10}, onePod{"pod-b", 0x11}, onePod{"pod-c", 0x12}, onePod{"pod-d", 0x13}
	o := l.newOneNode([]onePod{a, b, c}, nil)
	nsA, nsB, nsC := o.pods[a.name], o.pods[b.name], o.pods[c.name]
	l.tcpSink(nsB, ":7000")
	l.tcpSink(nsC, ":7000")
	for _, dst := range []string{b.ip4(), c.ip4()} {
		if err := l.waitPing(nsA, dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// The transfer, until every reload is done.
	stop := make(chan struct{})
	var stopOnce sync.Once
	end := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(end)
	type result struct {
		rep sinkReport
		err error
		end time.Time
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		rep, err := tcpSend(nsA, hostPort(b.ip4(), 7000), 0, stop)
		done <- result{rep, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // under way

	t.Run("broken-file", func(t *testing.T) {
		m := o.u.reload(t, ufpdConfig{}, []byte(`{"policy": {"Uplink": `))
		t.Log(o.u.waitLog(t, m, 5*time.Second, "reload", "rejected; the running policy stays"))
	})
	t.Run("invalid-policy", func(t *testing.T) {
		bad := o.config([]onePod{a, b, c}, nil)
		bad.Policy.Endpoints[2].IpConfigurations[0].IpAddress = "10.99.0.12" // outside the network's subnets
		raw, err := json.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		m := o.u.reload(t, ufpdConfig{}, raw)
		line := o.u.waitLog(t, m, 5*time.Second, "reload", "rejected; the running policy stays")
		t.Log(line)
		if !strings.Contains(line, "IpConfigurations[0].IpAddress") {
			t.Errorf("the rejection does not name the bad field: %s", line)
		}
		// (Pings could be lost here: the transfer fills pod-a's queue.)
		if _, err := tcpSend(nsA, hostPort(c.ip4(), 7000), 64<<10, nil); err != nil {
			t.Errorf("after the rejected reload: %v", err)
		}
	})

	t.Run("add-and-remove-pods", func(t *testing.T) {
		l := l.in(t)
		cfg := o.config([]onePod{a, b, d}, nil) // makes pod-d's namespace
		nsD := o.pods[d.name]
		l.tcpSink(nsD, ":7000")
		m := o.u.reload(t, cfg, nil)
		t.Log(o.u.waitLog(t, m, 5*time.Second, "configuration reloaded"))
		o.u.waitLog(t, m, time.Second, "port device up", "port="+d.name, "netns="+nsD)
		o.u.waitLog(t, m, time.Second, "port device removed", "port="+c.name)
		if !l.linkExists(nsD, "eth0") {
			t.Errorf("%s has no eth0 after the reload that added it", d.name)
		}
		if l.linkExists(nsC, "eth0") {
			t.Errorf("%s's eth0 is still there after the reload that removed it", c.name)
		}
		if err := l.waitPing(nsA, d.ip4(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := tcpSend(nsA, hostPort(d.ip6(), 7000), 64<<10, nil); err != nil {
			t.Error(err)
		}
		if err := l.ping(nsA, c.ip4(), 1); err == nil {
			t.Errorf("%s answers after it was removed", c.name)
		}
	})
	reloaded := time.Now()
	time.Sleep(500 * time.Millisecond) // some more after the last reload
	end()

	r := <-done
	if r.err != nil {
		t.Fatalf("the transfer across the reloads: %v", r.err)
	}
	if r.end.Before(reloaded) {
		t.Errorf("the transfer ended %v after it began, before the reloads were done (%v): it did not span them",
			r.end.Sub(start).Round(time.Millisecond), reloaded.Sub(start).Round(time.Millisecond))
	}
	t.Logf("transfer: %d MiB in %v across the reloads, every byte verified", r.rep.n>>20, r.end.Sub(start).Round(time.Millisecond))
	if r.rep.peer.Addr().String() != a.ip4() {
		t.Errorf("the sink saw the client as %s, want %s", r.rep.peer, a.ip4())
	}

	// SIGTERM: ufpd exits and its TAPs are gone, pod-d's included.
	o.u.stop()
	o.u.waitLog(t, 0, time.Second, "ufpd stopped")
	for _, ns := range []string{nsA, nsB, o.pods[d.name]} {
		if l.linkExists(ns, "eth0") {
			t.Errorf("%s still has its eth0 after ufpd stopped", ns)
		}
	}
	if l.linkExists(o.node, "vEthernet") {
		t.Errorf("the node still has vEthernet after ufpd stopped")
	}
}
