package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
)

// TestUfpdRestartKeepsConns proves that NATed and port-mapped TCP
// connections live through SIGKILL and restart. A pod has OutBoundNAT and
// a PortMapping (node port 8100 to its port 7100). Each of ten rounds
// opens two more connections, one from the pod to an outside host
// (translated to the node's address and a port of its pool) and one from
// the outside host to the node's mapped port, waits until ufpd has
// written its connections file, kills ufpd with SIGKILL and starts it
// again. After each restart the outside host pushes a line down every
// NATed connection opened so far, and the pod down every mapped one, and
// the other side echoes: the outside's packets to the NATed connections
// reach the pod (not the node's stack, which would reset them), and the
// pod's packets on the mapped ones leave from port 8100 (not from a new
// NAT port, which the outside host would reset). No TCP keepalive runs,
// so nothing is sent during an outage.
func TestUfpdRestartKeepsConns(t *testing.T) {
	const rounds = 10
	l := newLab(t, "ping")
	o := &oneNode{l: l, node: l.netns("node"), ext: l.netns("ext"), pods: map[string]string{}}
	l.veth(o.node, "eth0", "", o.ext, "eth0", oneExtMAC)
	l.ip("-n", o.ext, "addr", "add", oneExtIP+"/24", "dev", "eth0")
	a := onePod{"pod-a", 0x10}
	cfg := o.config([]onePod{a}, nil)
	ep := &cfg.Policy.Endpoints[0]
	ep.Policies = append(ep.Policies, pol("PortMapping", hns.PortMappingSettings{Protocol: 6, InternalPort: 7100, ExternalPort: 8100}))
	nsA := o.pods[a.name]

	dir := t.TempDir()
	rc := restartConfig{ufpdConfig: cfg, API: restartAPI{Socket: filepath.Join(dir, "ufpd.sock")}, State: filepath.Join(dir, "state", "ufpd.state")}
	cfgPath := filepath.Join(dir, "ufpd.json")
	raw, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	u := l.runUfpd(o.node, cfgPath, cfg)
	if err := l.waitPing(nsA, oneExtIP, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// The outside host's server, whose side of each NATed connection
	// pushes; the pod's echo server behind the mapping.
	extLn := listenNoKeepAlive(t, o.ext, oneExtIP+":9000")
	podLn := listenNoKeepAlive(t, nsA, ":7100")

	var conns []*pushConn
	connsFile := rc.State + ".conns"
	for round := 1; round <= rounds; round++ {
		// A NATed connection: the pod dials out and echoes.
		pc, err := dialNoKeepAlive(nsA, oneExtIP+":9000")
		if err != nil {
			t.Fatalf("round %d: pod to outside: %v", round, err)
		}
		t.Cleanup(func() { pc.Close() })
		go io.Copy(pc, pc)
		extSide, err := acceptWithin(extLn, labIOTimeout)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if h, _, _ := net.SplitHostPort(extSide.RemoteAddr().String()); h != oneNodeIP {
			t.Fatalf("round %d: the outside sees the pod's connection from %s, want the node's %s", round, extSide.RemoteAddr(), oneNodeIP)
		}
		conns = append(conns, newPushConn(t, fmt.Sprintf("nat-%d (outside sees %s)", round, extSide.RemoteAddr()), extSide))
		// A port-mapped connection: the outside dials the node's port.
		mc, err := dialNoKeepAlive(o.ext, net.JoinHostPort(oneNodeIP, "8100"))
		if err != nil {
			t.Fatalf("round %d: outside to the mapped port: %v", round, err)
		}
		t.Cleanup(func() { mc.Close() })
		go io.Copy(mc, mc)
		podSide, err := acceptWithin(podLn, labIOTimeout)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		conns = append(conns, newPushConn(t, fmt.Sprintf("mapped-%d (outside at %s)", round, mc.LocalAddr()), podSide))
		for _, c := range conns[len(conns)-2:] {
			if err := c.push(fmt.Sprintf("round %d before the kill", round)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		opened := time.Now()
		if err := waitWritten(connsFile, opened, 5*time.Second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}

		u.kill(t)
		restarted := time.Now()
		u = l.runUfpd(o.node, cfgPath, cfg)
		line := u.waitLog(t, 0, time.Second, "connections restored")
		t.Logf("round %d: ufpd serving %v after the restart; %s", round, time.Since(restarted).Round(time.Millisecond), line)

		survived := 0
		for _, c := range conns {
			if err := c.push(fmt.Sprintf("round %d after the restart", round)); err != nil {
				t.Errorf("round %d: %s: %v", round, c.name, err)
				continue
			}
			survived++
		}
		t.Logf("round %d: %d of %d connections carried on", round, survived, len(conns))
		if survived != len(conns) {
			t.FailNow()
		}
	}
}

// pushConn is the side of a connection that pushes a line and reads it
// back from the other side, which echoes.
type pushConn struct {
	name string
	c    net.Conn
	r    *bufio.Reader
}

func newPushConn(t *testing.T, name string, c net.Conn) *pushConn {
	t.Cleanup(func() { c.Close() })
	return &pushConn{name: name, c: c, r: bufio.NewReader(c)}
}

func (p *pushConn) push(msg string) error {
	p.c.SetDeadline(time.Now().Add(labIOTimeout))
	defer p.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(p.c, msg+"\n"); err != nil {
		return err
	}
	line, err := p.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("push %q: %w", msg, err)
	}
	if line != msg+"\n" {
		return fmt.Errorf("push %q: got %q back", msg, line)
	}
	return nil
}

// listenNoKeepAlive listens on TCP addr in namespace ns; the connections
// it accepts send no keepalives.
func listenNoKeepAlive(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	lc := net.ListenConfig{KeepAlive: -1}
	if err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("%s: listen %s: %v", ns, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialNoKeepAlive connects from namespace ns to addr with no keepalives.
func dialNoKeepAlive(ns, addr string) (net.Conn, error) {
	var c net.Conn
	d := net.Dialer{Timeout: 3 * time.Second, KeepAlive: -1}
	err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		c, err = d.Dial("tcp", addr)
		return err
	})
	return c, err
}

func acceptWithin(ln net.Listener, within time.Duration) (net.Conn, error) {
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(within))
	defer ln.(*net.TCPListener).SetDeadline(time.Time{})
	return ln.Accept()
}

// waitWritten waits until the file at path was written after since.
func waitWritten(path string, since time.Time, within time.Duration) error {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.ModTime().After(since) {
			return nil
		}
	}
	return fmt.Errorf("%s not written within %v of %s", path, within, since.Format(time.StampMicro))
}
