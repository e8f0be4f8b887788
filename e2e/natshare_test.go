package e2e

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// TestNetstackNATPortShare: pod-a and pod-b leave through the host's
// address with a port share of 16 each. pod-a holds 16 connections to an
// outside server open and tries 8 more at once: they are never answered
// (each SYN, and each of its retransmissions, is dropped as
// nat-share-exceeded and counted on pod-a), while pod-b connects through
// the same pool and exchanges data.
func TestNetstackNATPortShare(t *testing.T) {
	const (
		share = 16
		extra = 8
	)
	policy := strings.Replace(nsL2BridgePolicy, `"ExceptionList": ["192.168.1.0/24"]}}]}`,
		`"ExceptionList": ["192.168.1.0/24"], "PortShare": 16}}]}`, 1)
	policy = strings.Replace(policy, `{"IpAddress": "fd00:244::11", "PrefixLength": 64}]}`,
		`{"IpAddress": "fd00:244::11", "PrefixLength": 64}],
     "Policies": [{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16"], "PortShare": 16}}]}`, 1)
	if policy == nsL2BridgePolicy {
		t.Fatal("the policy was not edited")
	}
	s := newNSSwitch(t, policy)
	a, b := s.pod("pod-a"), s.pod("pod-b")
	ext := s.external(nsInternetIP)
	s.serve()
	server := netip.AddrPortFrom(nsInternetIP, 80)
	accepted := nsTCPServer(t, ext, server, "")

	held := make([]net.Conn, 0, share)
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range share {
		ctx, cancel := context.WithTimeout(context.Background(), nsTimeout)
		c, err := a.net.DialContextTCPAddrPort(ctx, server)
		cancel()
		if err != nil {
			t.Fatalf("pod-a's connection %d of its share: %v", len(held)+1, err)
		}
		held = append(held, c)
		if from := nsRecv(t, accepted, "the server's accept"); from.Addr() != nsHostIP {
			t.Fatalf("the server accepted a connection from %s, want the host's %s", from, nsHostIP)
		}
	}

	// Over the share: each dial gives up after a few SYN retransmissions.
	// It must fail however long it is given; pod-b's connection meanwhile
	// must succeed.
	var wg sync.WaitGroup
	overErrs := make(chan error, extra)
	for range extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := a.net.DialContextTCPAddrPort(ctx, server)
			if err == nil {
				c.Close()
			}
			overErrs <- err
		}()
	}
	if _, err := nsEchoTCP(t, b, server, 0, nsRandom(64<<10)); err != nil {
		t.Fatalf("pod-b while pod-a is over its share: %v", err)
	}
	if from := nsRecv(t, accepted, "the server's accept of pod-b"); from.Addr() != nsHostIP {
		t.Errorf("the server accepted pod-b's connection from %s, want the host's %s", from, nsHostIP)
	}
	wg.Wait()
	close(overErrs)
	for err := range overErrs {
		if err == nil {
			t.Error("pod-a connected over its port share")
		}
	}

	st := s.sw.Stats()
	reason := dataplane.DropNATShareExceeded.String()
	for _, p := range st.Ports {
		switch n := p.Drops[reason]; {
		case p.Name == "pod-a" && n < extra:
			t.Errorf("pod-a counted %d %s drops, want at least %d (one per SYN over the share)", n, reason, extra)
		case p.Name != "pod-a" && n != 0:
			t.Errorf("%s counted %d %s drops, want none", p.Name, n, reason)
		}
	}
	pool := s.sw.NAT().Pool(nsHostIP)
	if pool == nil {
		t.Fatalf("no NAT pool on %s", nsHostIP)
	}
	ps := pool.Stats()
	if ps.PortShare[nat.ClassTCP] != share || ps.ShareExceeded < extra || ps.Exhausted != 0 {
		t.Errorf("pool: share %d, %d refusals over it, %d exhausted; want %d, at least %d, 0",
			ps.PortShare[nat.ClassTCP], ps.ShareExceeded, ps.Exhausted, share, extra)
	}
	// pod-a's share, and pod-b's connection if it has not left the flow
	// table yet.
	if n := ps.InUse[nat.ClassTCP]; n != share && n != share+1 {
		t.Errorf("%d TCP ports of the pool in use, want pod-a's %d (and pod-b's one)", n, share)
	}
}
