package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// TestUfpdRestart proves that ufpd's state survives a crash. ufpd starts
// with a state file and the single node's network but no endpoints; pods
// are made through the API and reach each other. While a client makes
// more changes one after another (endpoints with and without a TAP,
// ACLs, load balancers), ufpd gets SIGKILL: the state it left (the state
// file with its journal replayed, as ufpd -show-state reads it) is whole,
// valid, and holds every change the API acknowledged, plus at most the
// one in flight. During the outage one pod's namespace is deleted, and
// the other pods keep their interfaces (same index, addresses, routes)
// and a TCP connection between them. The restarted ufpd reports what it
// restored (the pods' TAPs taken back, the deleted pod's port failed, and
// why), serves the state file's endpoints, and the pods and the old
// connection work again through the same interfaces. The API still
// changes things, the unrestorable endpoint can be deleted, and SIGTERM
// removes every TAP and gives the uplink back as it was.
func TestUfpdRestart(t *testing.T) {
	l := newLab(t, "ping", "sysctl")
	start := time.Now()
	o := &oneNode{l: l, node: l.netns("node"), ext: l.netns("ext"), pods: map[string]string{}}
	l.veth(o.node, "eth0", "", o.ext, "eth0", oneExtMAC)
	l.ip("-n", o.ext, "addr", "add", oneExtIP+"/24", "dev", "eth0")
	l.ip("-n", o.ext, "addr", "add", oneExtIP6+"/64", "dev", "eth0", "nodad")
	uplinkBefore := l.uplinkSysctls(o.node)

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	rc := restartConfig{
		ufpdConfig: o.config(nil, nil), // the network, the node's vNIC and the uplink; no pods
		API:        restartAPI{Socket: filepath.Join(dir, "ufpd.sock")},
		State:      filepath.Join(stateDir, "ufpd.state"),
	}
	cfgPath := filepath.Join(dir, "ufpd.json")
	raw, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	u := l.runUfpd(o.node, cfgPath, rc.ufpdConfig)
	cl := api.NewClient(rc.API.Socket)

	// Pods through the API.
	a, b, c := onePod{"pod-a", 0x10}, onePod{"pod-b", 0x11}, onePod{"pod-c", 0x12}
	nat := pol("OutBoundNAT", hns.OutBoundNATSettings{Exceptions: []string{"10.244.0.0/16", "10.96.0.0/12"}})
	for _, p := range []onePod{a, b, c} {
		ns := l.netns(p.name)
		o.pods[p.name] = ns
		ep := &api.Endpoint{
			EndpointConfig: endpoint(p.name, oneNet, p.mac(), []string{p.ip4(), p.ip6()}, nat),
			Device:         &api.Device{Type: "tap", NetNS: ns},
		}
		if _, err := apiPost(cl, "/v1/endpoints", ep); err != nil {
			t.Fatalf("creating %s: %v", p.name, err)
		}
		if !l.linkExists(ns, "eth0") {
			t.Fatalf("%s has no eth0 after its endpoint was created", p.name)
		}
	}
	nsA, nsB, nsC := o.pods[a.name], o.pods[b.name], o.pods[c.name]
	for _, w := range []struct{ ns, dst string }{{nsA, b.ip4()}, {nsA, c.ip4()}, {nsB, a.ip6()}} {
		if err := l.waitPing(w.ns, w.dst, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	l.tcpSink(nsB, ":7000")
	if _, err := tcpSend(nsA, hostPort(b.ip4(), 7000), 256<<10, nil); err != nil {
		t.Fatalf("pod-a to pod-b through ufpd: %v", err)
	}
	// The connection that lives through the crash.
	l.tcpEcho(nsB, ":7001")
	conn := l.echoConn(nsA, hostPort(b.ip4(), 7001))
	if err := conn.exchange("before the crash"); err != nil {
		t.Fatal(err)
	}
	before := map[string]podLink{}
	for _, p := range []onePod{a, b} {
		before[p.name] = l.podLink(o.pods[p.name])
	}
	t.Logf("pods up through the API, ping, TCP and the long-lived connection checked (%v)", time.Since(start).Round(time.Millisecond))

	// SIGKILL while a client makes changes.
	churnNS := make([]string, 6)
	for i := range churnNS {
		churnNS[i] = l.netns(fmt.Sprintf("churn-%d", i))
	}
	killAfter := 4 + mrand.IntN(20)
	ch := &churn{cl: cl, devNS: churnNS, reached: make(chan struct{}), killAfter: killAfter}
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		ch.run(120)
	}()
	select {
	case <-ch.reached:
	case <-churned:
	case <-time.After(20 * time.Second):
		t.Fatalf("the API did not acknowledge %d changes within 20 s", killAfter)
	}
	// Kill either anywhere in the next change (one takes 10-30 ms: a TAP
	// made, the state written and synced) or the one after it, or in the
	// narrow window after the next change is persisted (its record in
	// the state's journal, or the state file replaced) and before its
	// answer is sent.
	if mrand.IntN(2) == 0 {
		d := time.Duration(mrand.IntN(20000)) * time.Microsecond
		t.Logf("SIGKILL %v after acknowledgement %d", d, killAfter)
		time.Sleep(d)
	} else {
		t.Logf("SIGKILL once the next change is persisted after acknowledgement %d", killAfter)
		if err := waitPersisted(rc.State, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	u.kill(t)
	select {
	case <-churned:
	case <-time.After(15 * time.Second):
		t.Fatal("the client making changes did not end within 15 s of the SIGKILL")
	}
	acked, inFlight, churnErr := ch.result()
	if len(acked) == 0 {
		t.Fatalf("no change was acknowledged before the SIGKILL: %v", churnErr)
	}
	if len(acked) >= 120 {
		t.Fatalf("every change was acknowledged before the SIGKILL: it did not land mid-change")
	}
	var ae *api.Error
	if errors.As(churnErr, &ae) {
		t.Fatalf("a change was refused before the SIGKILL (the test's changes must be valid): %v", churnErr)
	}
	t.Logf("SIGKILL after %d acknowledged changes (last revision %d); in flight: %s (%v)",
		len(acked), acked[len(acked)-1].rev, inFlight, churnErr)
	if out, _ := l.cmd("", "ip", "-n", o.node, "-o", "link", "show"); strings.Contains(out, "ufptap") {
		t.Logf("note: the SIGKILL left a TAP under its temporary name in the node's namespace:\n%s", out)
	}

	st := l.checkState(t, rc.State, cfgPath, acked, inFlight)
	t.Logf("state file checked %v after the SIGKILL: revision %d, %d endpoints, %d load balancers, %d devices",
		time.Since(killed).Round(time.Millisecond), st.Revision, len(st.policy.Endpoints), len(st.policy.LoadBalancers), len(st.Devices))

	// The outage: pod-c's namespace goes; pod-a's and pod-b's interfaces
	// stay as they were.
	l.ip("netns", "del", nsC)
	for _, p := range []onePod{a, b} {
		now := l.podLink(o.pods[p.name])
		if err := now.same(before[p.name]); err != nil {
			t.Errorf("%s during the outage: %v", p.name, err)
		}
		t.Logf("%s during the outage: eth0 is interface %d with %v, default route via %s %v",
			p.name, now.index, now.addrs, now.gw4, now.flags)
		if !slices.Contains(now.addrs, p.ip4()+"/24") || now.gw4 != "10.244.1.1" {
			t.Errorf("%s during the outage: eth0 has %v, default route via %q; want %s/24 via 10.244.1.1", p.name, now.addrs, now.gw4, p.ip4())
		}
	}

	// The restart.
	restarted := time.Now()
	u2 := l.runUfpd(o.node, cfgPath, rc.ufpdConfig)
	t.Logf("ufpd serving %v after the restart", time.Since(restarted).Round(time.Millisecond))
	t.Log(u2.waitLog(t, 0, time.Second, "configuration restored"))
	t.Log(u2.waitLog(t, 0, time.Second, "port device not restored", "port="+c.name))
	status, err := cl.Status(ctxIO(t))
	if err != nil {
		t.Fatal(err)
	}
	checkRestored(t, status, st, rc.State, c.name, nsC)

	eps, err := cl.Endpoints(ctxIO(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameEndpoints(eps, st); err != nil {
		t.Errorf("GET /v1/endpoints after the restart differs from the state file: %v", err)
	}

	for _, p := range []onePod{a, b} {
		if err := l.podLink(o.pods[p.name]).same(before[p.name]); err != nil {
			t.Errorf("%s after the restart: %v", p.name, err)
		}
	}
	if err := l.waitPing(nsA, b.ip4(), 5*time.Second); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	t.Logf("pod-a reaches pod-b again %v after the restart", time.Since(restarted).Round(time.Millisecond))
	for _, w := range []struct{ ns, dst string }{{nsA, b.ip4()}, {nsB, a.ip4()}, {nsB, a.ip6()}} {
		if err := l.ping(w.ns, w.dst, 3); err != nil {
			t.Errorf("after the restart: %v", err)
		}
	}
	if ns, ip, ok := st.churnWithDevice(); ok {
		if err := l.waitPing(nsA, ip, 5*time.Second); err != nil {
			t.Errorf("a churned endpoint's reattached TAP in %s: %v", ns, err)
		}
	}
	if err := conn.exchange("after the restart"); err != nil {
		t.Errorf("the connection from before the crash: %v", err)
	}
	if _, err := tcpSend(nsA, hostPort(b.ip4(), 7000), 256<<10, nil); err != nil {
		t.Errorf("a new connection after the restart: %v", err)
	}

	// The API after the restart: a new endpoint while pod-c's port has
	// no device, the deletion of pod-c's endpoint, and one more endpoint
	// made and deleted once it is gone.
	t.Run("api", func(t *testing.T) {
		l := l.in(t)
		made := st.Revision
		create := func(name, ip string, mac byte) error {
			t.Helper()
			ns := l.netns(name)
			ep := &api.Endpoint{
				EndpointConfig: endpoint(name, oneNet, fmt.Sprintf("02:00:00:00:03:%02x", mac), []string{ip}, nat),
				Device:         &api.Device{Type: "tap", NetNS: ns},
			}
			rev, err := apiPost(cl, "/v1/endpoints", ep)
			if err != nil {
				return err
			}
			if made++; rev != made {
				t.Errorf("creating %s is revision %d, want %d", name, rev, made)
			}
			if err := l.waitPing(nsA, ip, 5*time.Second); err != nil {
				t.Error(err)
			}
			if err := cl.DeleteEndpoint(ctxIO(t), name); err != nil {
				t.Fatal(err)
			}
			made++
			if l.linkExists(ns, "eth0") {
				t.Errorf("the deleted endpoint's eth0 is still in %s", ns)
			}
			return nil
		}
		if err := create("late-1", "10.244.1.200", 1); err != nil {
			t.Errorf("creating an endpoint while %s's port (namespace gone) has no device: %v", c.name, err)
		}
		if err := cl.DeleteEndpoint(ctxIO(t), c.name); err != nil {
			t.Errorf("deleting the endpoint whose namespace is gone: %v", err)
		} else {
			made++
		}
		if _, err := cl.Endpoint(ctxIO(t), c.name); !api.IsNotFound(err) {
			t.Errorf("GET the deleted %s: %v, want not found", c.name, err)
		}
		// The client whose change got no answer tries it again, as an
		// orchestrator does: a conflict if it was kept, done now if not
		// (a TAP the killed ufpd made for it is taken back). An ACL is
		// not tried again: appending it twice is not idempotent.
		if f := inFlight; f != nil && f.kind != "acl" {
			rev, err := apiPost(cl, f.path, f.body)
			switch {
			case st.inFlightKept && !api.IsConflict(err):
				t.Errorf("trying again %s, kept in the state: %v, want a conflict", f, err)
			case !st.inFlightKept && err != nil:
				t.Errorf("trying again %s, lost at the SIGKILL: %v", f, err)
			case !st.inFlightKept:
				if made++; rev != made {
					t.Errorf("trying again %s is revision %d, want %d", f, rev, made)
				}
				t.Logf("%s, lost at the SIGKILL, tried again: revision %d", f, rev)
			default:
				t.Logf("%s, kept in the state, tried again: %v", f, err)
			}
			if f.netns != "" {
				if err := l.waitPing(nsA, f.ip, 5*time.Second); err != nil {
					t.Errorf("%s: %v", f, err)
				}
			}
		}
		if err := create("late-2", "10.244.1.201", 2); err != nil {
			t.Errorf("creating an endpoint after %s was deleted: %v", c.name, err)
		}
		s, err := cl.Status(ctxIO(t))
		if err != nil {
			t.Fatal(err)
		}
		if s.Revision != made {
			t.Errorf("revision %d after the changes, want %d", s.Revision, made)
		}
	})

	// SIGTERM: every TAP goes (stop checks those of the running
	// configuration), the uplink's settings are as before the first start.
	cfg, err := cl.Config(ctxIO(t))
	if err != nil {
		t.Fatal(err)
	}
	u2.cfg.Devices = nil
	for _, d := range cfg.Devices {
		u2.cfg.Devices = append(u2.cfg.Devices, ufpdDevice{Port: d.Port, Type: d.Type, Name: d.Name, NetNS: d.NetNS})
	}
	if len(u2.cfg.taps()) < 3 {
		t.Errorf("GET /v1/config lists %d TAPs: %+v", len(u2.cfg.taps()), cfg.Devices)
	}
	u2.stop()
	u2.waitLog(t, 0, time.Second, "ufpd stopped")
	if out, _ := l.cmd("", "ip", "-n", o.node, "-o", "link", "show"); strings.Contains(out, "ufptap") || strings.Contains(out, "vEthernet") {
		t.Errorf("the node's namespace keeps a TAP after SIGTERM:\n%s", out)
	}
	for _, ns := range append([]string{nsA, nsB}, churnNS...) {
		if l.linkExists(ns, "eth0") {
			t.Errorf("%s keeps an eth0 after SIGTERM", ns)
		}
	}
	if after := l.uplinkSysctls(o.node); after != uplinkBefore {
		t.Errorf("the uplink's settings after SIGTERM are %s, before the first start %s: "+
			"the restarted ufpd took the ones the killed one had set for the originals", after, uplinkBefore)
	}
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}

// restartConfig is ufpd's configuration file with the API's socket and
// the state file, which ufpdConfig has no fields for.
type restartConfig struct {
	ufpdConfig
	API   restartAPI `json:"api"`
	State string     `json:"state"`
}

type restartAPI struct {
	Socket string `json:"socket"`
}

// runUfpd runs ufpd in namespace node on the configuration file at path
// as it is (a restart reads the same file), as startUfpd does. taps is
// what stop checks is gone; the caller updates u.cfg as the API changes
// the devices.
func (l *lab) runUfpd(node, path string, taps ufpdConfig) *ufpd {
	t := l.t
	t.Helper()
	u := &ufpd{l: l, node: node, path: path, cfg: taps}
	bin := ufpdBinary(t)
	if l.plainUfpd {
		bin = ufpdPlainBinary(t)
	}
	u.cmd = exec.Command("ip", "netns", "exec", node, bin, "-config", path)
	u.cmd.Stdout, u.cmd.Stderr = &u.log, &u.log
	var err error
	if u.exited, err = startOrphanSafe(u.cmd, syscall.SIGTERM); err != nil {
		t.Fatalf("starting ufpd in %s: %v", node, err)
	}
	t.Cleanup(func() {
		u.stop()
		if t.Failed() {
			t.Logf("ufpd in %s (pid %d), its log:\n%s", node, u.cmd.Process.Pid, u.log.String())
		}
	})
	u.waitLog(t, 0, 15*time.Second, "ufpd serving")
	return u
}

// waitPersisted waits until a change is persisted to the state at path:
// its journal grown or replaced, or the state file replaced (renamed
// over by a compaction), polling their inodes and the journal's size.
func waitPersisted(path string, within time.Duration) error {
	var st0, j0 syscall.Stat_t
	if err := syscall.Stat(path, &st0); err != nil {
		return err
	}
	syscall.Stat(path+".journal", &j0)
	for end := time.Now().Add(within); time.Now().Before(end); {
		var st, j syscall.Stat_t
		if syscall.Stat(path, &st) == nil && st.Ino != st0.Ino {
			return nil
		}
		if syscall.Stat(path+".journal", &j) == nil && (j.Ino != j0.Ino || j.Size != j0.Size) {
			return nil
		}
		time.Sleep(50 * time.Microsecond)
	}
	return fmt.Errorf("%s: no change persisted within %v", path, within)
}

// kill sends ufpd SIGKILL and waits until it is gone; its TAPs stay.
func (u *ufpd) kill(t *testing.T) {
	t.Helper()
	u.stopped = true // nothing for stop to do
	if err := syscall.Kill(u.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to ufpd (pid %d): %v", u.cmd.Process.Pid, err)
	}
	select {
	case <-u.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("ufpd (pid %d) still runs 10 s after SIGKILL", u.cmd.Process.Pid)
	}
}

// ctxIO returns a context bounded by labIOTimeout for one API call.
func ctxIO(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	t.Cleanup(cancel)
	return ctx
}

// apiPost creates an object and returns the revision ufpd acknowledged
// it as.
func apiPost(cl *api.Client, path string, in any) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), labIOTimeout)
	defer cancel()
	var ack struct {
		Revision uint64 `json:"revision"`
	}
	err := cl.Do(ctx, http.MethodPost, path, in, &ack)
	return ack.Revision, err
}

// change is one change the churn made: an endpoint (with a TAP in netns
// if that is set), an ACL (name) on an endpoint, or a load balancer.
type change struct {
	kind     string // endpoint, acl, lb
	name     string
	endpoint string // an acl's
	netns    string // an endpoint's device
	rev      uint64 // the revision acknowledged
	ip       string // an endpoint's IPv4 address
	path     string // the request: POST path body
	body     any
}

func (c *change) String() string {
	if c == nil {
		return "none"
	}
	switch c.kind {
	case "acl":
		return fmt.Sprintf("acl %s on %s", c.name, c.endpoint)
	case "endpoint":
		if c.netns != "" {
			return fmt.Sprintf("endpoint %s with a TAP in %s", c.name, c.netns)
		}
	}
	return c.kind + " " + c.name
}

// churn makes changes one after another, recording each the API
// acknowledged, until one fails.
type churn struct {
	cl        *api.Client
	devNS     []string      // namespaces for the endpoints with a TAP, one each
	killAfter int           // reached is closed after this many acknowledgements
	reached   chan struct{} // closed once killAfter changes are acknowledged

	mu       sync.Mutex
	acked    []change
	inFlight *change
	err      error
}

// run makes up to n changes, cycling: an endpoint with a TAP (while
// namespaces last, else without), one without, an ACL on the last one
// without, a load balancer over pod-a and pod-b.
func (c *churn) run(n int) {
	var plain string
	nextNS := 0
	for i := range n {
		var ch change
		var path string
		var body any
		switch i % 4 {
		case 0, 1:
			name := fmt.Sprintf("churn-ep-%d", i)
			ep := &api.Endpoint{EndpointConfig: endpoint(name, oneNet, fmt.Sprintf("02:00:00:00:02:%02x", i),
				[]string{fmt.Sprintf("10.244.1.%d", 32+i), fmt.Sprintf("fd00:244:1::%x", 32+i)})}
			ch = change{kind: "endpoint", name: name, ip: ep.IpConfigurations[0].IpAddress}
			if i%4 == 0 && nextNS < len(c.devNS) {
				ch.netns = c.devNS[nextNS]
				ep.Device = &api.Device{Type: "tap", NetNS: ch.netns}
				nextNS++
			} else {
				plain = name
			}
			path, body = "/v1/endpoints", ep
		case 2:
			id := fmt.Sprintf("churn-acl-%d", i)
			p := pol("ACL", hns.ACLSettings{Id: id, Action: "Allow", Direction: "In", Priority: uint16(100 + i),
				Protocols: "TCP", LocalPorts: fmt.Sprint(9000 + i)})
			ch = change{kind: "acl", name: id, endpoint: plain}
			path, body = "/v1/endpoints/"+plain+"/policies", &p
		case 3:
			name := fmt.Sprintf("churn-lb-%d", i)
			lb := &api.LoadBalancer{Name: name, HostComputeEndpoints: []string{"pod-a", "pod-b"},
				FrontendVIPs: []string{fmt.Sprintf("10.96.1.%d", i)},
				PortMappings: []hns.LoadBalancerPortMappingConfig{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}}}
			ch = change{kind: "lb", name: name}
			path, body = "/v1/loadbalancers", lb
		}
		ch.path, ch.body = path, body
		c.mu.Lock()
		c.inFlight = &ch
		c.mu.Unlock()
		rev, err := apiPost(c.cl, path, body)
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.mu.Unlock()
			return
		}
		ch.rev = rev
		c.acked = append(c.acked, ch)
		c.inFlight = nil
		if len(c.acked) == c.killAfter {
			close(c.reached)
		}
		c.mu.Unlock()
	}
}

// result returns the acknowledged changes, the one in flight when the
// churn ended (nil if none) and the error that ended it.
func (c *churn) result() ([]change, *change, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.acked), c.inFlight, c.err
}

// restartState is the state file as read back, with its policy parsed.
type restartState struct {
	Revision uint64          `json:"revision"`
	Policy   json.RawMessage `json:"policy"`
	Devices  []ufpdDevice    `json:"devices"`
	policy   *vswitch.Config
	// inFlightKept says that the change in flight at the SIGKILL is in
	// the state: it was done and persisted, and its answer lost.
	inFlightKept bool
}

// churnWithDevice returns the namespace and address of a churned
// endpoint with a TAP in the state, if there is one.
func (s *restartState) churnWithDevice() (ns, ip string, ok bool) {
	for _, d := range s.Devices {
		if !strings.HasPrefix(d.Port, "churn-") {
			continue
		}
		for _, ep := range s.policy.Endpoints {
			if ep.Name == d.Port && len(ep.IpConfigurations) > 0 {
				return d.NetNS, ep.IpConfigurations[0].IpAddress, true
			}
		}
	}
	return "", "", false
}

// checkState reads the state a killed ufpd left, as a restart restores
// it (ufpd -show-state: the state file with its journal replayed), and
// checks that it is whole and valid (ufpd -check reads it as a restart
// would), and that it holds every acknowledged change and nothing more
// than the one in flight. Temporary files of a write the kill cut short
// are noted.
func (l *lab) checkState(t *testing.T, path, cfgPath string, acked []change, inFlight *change) *restartState {
	t.Helper()
	raw, report, err := showState(t, path)
	if err != nil {
		t.Fatalf("ufpd -show-state after SIGKILL: %v\n%s", err, report)
	}
	t.Logf("ufpd -show-state: %s", strings.TrimSpace(report))
	st := &restartState{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(st); err != nil {
		t.Fatalf("the state after SIGKILL is not a whole state (%d bytes): %v\n%s", len(raw), err, raw)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("the state after SIGKILL has data after its document")
	}
	if st.policy, err = vswitch.ParseConfig(st.Policy); err != nil {
		t.Fatalf("the state's policy after SIGKILL: %v", err)
	}
	if out, err := l.cmd("", ufpdBinary(t), "-check", "-config", cfgPath); err != nil || !strings.Contains(out, path+": valid") {
		t.Fatalf("ufpd -check on the state after SIGKILL: %v\n%s", err, out)
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*")); len(tmps) > 0 {
		t.Logf("note: the SIGKILL left temporary files beside the state (ufpd reads only %s): %v", filepath.Base(path), tmps)
	}

	devs := map[string]ufpdDevice{}
	for _, d := range st.Devices {
		devs[d.Port] = d
	}
	eps := map[string]*hns.EndpointConfig{}
	for i := range st.policy.Endpoints {
		eps[st.policy.Endpoints[i].Name] = &st.policy.Endpoints[i]
	}
	lbs := map[string]bool{}
	for _, lb := range st.policy.LoadBalancers {
		lbs[lb.Name] = true
	}
	has := func(c *change) bool {
		switch c.kind {
		case "endpoint":
			if eps[c.name] == nil {
				return false
			}
			d, ok := devs[c.name]
			return c.netns == "" && !ok || ok && d.Type == "tap" && d.NetNS == c.netns
		case "acl":
			ep := eps[c.endpoint]
			return ep != nil && slices.ContainsFunc(ep.Policies, func(p hns.PolicyConfig) bool {
				return p.Type == "ACL" && bytes.Contains(p.Settings, []byte(`"`+c.name+`"`))
			})
		}
		return lbs[c.name]
	}
	for i := range acked {
		if !has(&acked[i]) {
			t.Errorf("acknowledged (revision %d) but not in the state: %s", acked[i].rev, &acked[i])
		}
	}
	// Everything in the state: the pods, the acknowledged changes and
	// perhaps the one in flight.
	want := 3 + len(acked) // the pods' endpoints are revisions 1-3
	if st.Revision != acked[len(acked)-1].rev {
		extra := inFlight != nil && has(inFlight)
		if !extra || st.Revision != acked[len(acked)-1].rev+1 {
			t.Errorf("the state is revision %d, the last acknowledged %d, the one in flight (%s) is there: %v",
				st.Revision, acked[len(acked)-1].rev, inFlight, extra)
		}
		want++
		st.inFlightKept = true
		t.Logf("the state holds the change in flight (%s): done and persisted, its answer lost", inFlight)
	} else {
		t.Logf("the state is the last acknowledged revision; the change in flight (%s) is not in it", inFlight)
	}
	if want != int(st.Revision) {
		t.Errorf("the state is revision %d after %d changes", st.Revision, want)
	}
	objects := len(st.policy.Endpoints) + len(st.policy.LoadBalancers)
	for _, ep := range st.policy.Endpoints {
		for _, p := range ep.Policies {
			if p.Type == "ACL" {
				objects++
			}
		}
	}
	if objects != want {
		t.Errorf("the state holds %d endpoints, ACLs and load balancers, %d changes were made", objects, want)
	}
	return st
}

// showState runs ufpd -show-state on the state file at path: the state a
// start restores from it (its journal replayed) as a state file, and
// ufpd's report of what the journal added and dropped.
func showState(t *testing.T, path string) (state []byte, report string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), labCmdTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	c := exec.CommandContext(ctx, ufpdBinary(t), "-show-state", path)
	c.Stdout, c.Stderr, c.WaitDelay = &out, &errOut, time.Second
	err = c.Run()
	return out.Bytes(), errOut.String(), err
}

// checkRestored checks the restart's report against the state it
// restored: the counts, every device taken back (the TAPs, and the
// uplink's existing interface) but pod-c's, which failed because its
// namespace nsC is gone.
func checkRestored(t *testing.T, s *api.Status, st *restartState, statePath, failed, nsC string) {
	t.Helper()
	r := s.Restored
	if r == nil {
		t.Fatalf("GET /v1/status has no restore report: %+v", s)
	}
	t.Logf("restored: from %s revision %d: %d networks, %d endpoints, %d load balancers; reattached %v, recreated %v, failed %+v",
		r.From, r.Revision, r.Networks, r.Endpoints, r.LoadBalancers, r.Reattached, r.Recreated, r.Failed)
	if r.From != statePath || r.Revision != st.Revision || s.Revision != st.Revision {
		t.Errorf("restored from %s revision %d, running revision %d; want %s revision %d", r.From, r.Revision, s.Revision, statePath, st.Revision)
	}
	if r.Networks != 1 || r.Endpoints != len(st.policy.Endpoints) || r.LoadBalancers != len(st.policy.LoadBalancers) {
		t.Errorf("restored %d networks, %d endpoints, %d load balancers; the state has 1, %d, %d",
			r.Networks, r.Endpoints, r.LoadBalancers, len(st.policy.Endpoints), len(st.policy.LoadBalancers))
	}
	var taps []string
	for _, d := range st.Devices {
		if (d.Type == "tap" || d.Type == "afpacket") && d.Port != failed {
			taps = append(taps, d.Port)
		}
	}
	slices.Sort(taps)
	got := slices.Sorted(slices.Values(r.Reattached))
	if !slices.Equal(got, taps) {
		t.Errorf("reattached %v, want every device of the state but %s's: %v", got, failed, taps)
	}
	for _, p := range r.Recreated {
		switch {
		case slices.Contains(taps, p) || p == failed:
			t.Errorf("port %s's TAP was made again rather than taken back", p)
		default:
			t.Errorf("port %s is reported as recreated; it has no TAP in the state", p)
		}
	}
	if len(r.Failed) != 1 || r.Failed[0].Port != failed || !strings.Contains(r.Failed[0].Error, nsC) {
		t.Errorf("failed %+v, want only %s, naming its namespace %s", r.Failed, failed, nsC)
	}
	if s.Devices != len(st.Devices)-1 {
		t.Errorf("%d devices open, the state has %d and one failed", s.Devices, len(st.Devices))
	}
}

// sameEndpoints reports how the API's endpoints differ from the state's.
func sameEndpoints(eps []api.Endpoint, st *restartState) error {
	want := map[string]string{}
	for _, ep := range st.policy.Endpoints {
		b, _ := json.Marshal(ep)
		want[ep.Name] = string(b)
	}
	devs := map[string]ufpdDevice{}
	for _, d := range st.Devices {
		devs[d.Port] = d
	}
	var errs []error
	for _, ep := range eps {
		b, _ := json.Marshal(ep.EndpointConfig)
		w, ok := want[ep.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("endpoint %s is not in the state", ep.Name))
			continue
		case w != string(b):
			errs = append(errs, fmt.Errorf("endpoint %s: API %s, state %s", ep.Name, b, w))
		}
		delete(want, ep.Name)
		d, hasDev := devs[ep.Name]
		switch {
		case hasDev != (ep.Device != nil):
			errs = append(errs, fmt.Errorf("endpoint %s: API device %+v, state %+v", ep.Name, ep.Device, d))
		case hasDev && (d.Type != ep.Device.Type || d.Name != ep.Device.Name || d.NetNS != ep.Device.NetNS):
			errs = append(errs, fmt.Errorf("endpoint %s: API device %+v, state %+v", ep.Name, *ep.Device, d))
		}
	}
	for name := range want {
		errs = append(errs, fmt.Errorf("endpoint %s of the state is not served", name))
	}
	return errors.Join(errs...)
}

// podLink is what a pod's eth0 is: its index, its addresses and the
// gateway of its IPv4 default route.
type podLink struct {
	index int
	links int // interfaces in the namespace, lo included
	addrs []string
	gw4   string
	flags []string // the default route's (linkdown while no one holds the TAP)
}

func (p podLink) same(q podLink) error {
	switch {
	case p.index == 0:
		return errors.New("eth0 is gone")
	case p.index != q.index:
		return fmt.Errorf("eth0 is interface %d, it was %d: a second interface was made", p.index, q.index)
	case p.links != q.links:
		return fmt.Errorf("%d interfaces in the namespace, there were %d", p.links, q.links)
	}
	return nil
}

// podLink reads eth0 in namespace ns.
func (l *lab) podLink(ns string) podLink {
	l.t.Helper()
	var p podLink
	var links []struct {
		Index int    `json:"ifindex"`
		Name  string `json:"ifname"`
	}
	l.ipJSON(&links, "-n", ns, "-j", "link", "show")
	p.links = len(links)
	for _, k := range links {
		if k.Name == "eth0" {
			p.index = k.Index
		}
	}
	if p.index == 0 {
		return p
	}
	var addrs []struct {
		Info []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	l.ipJSON(&addrs, "-n", ns, "-j", "addr", "show", "dev", "eth0")
	for _, a := range addrs {
		for _, i := range a.Info {
			p.addrs = append(p.addrs, fmt.Sprintf("%s/%d", i.Local, i.PrefixLen))
		}
	}
	var routes []struct {
		Gateway string   `json:"gateway"`
		Flags   []string `json:"flags"`
	}
	l.ipJSON(&routes, "-n", ns, "-4", "-j", "route", "show", "default", "dev", "eth0")
	if len(routes) > 0 {
		p.gw4, p.flags = routes[0].Gateway, routes[0].Flags
	}
	return p
}

// ipJSON runs ip with -j and decodes its output into v.
func (l *lab) ipJSON(v any, args ...string) {
	l.t.Helper()
	out := l.ip(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// uplinkSysctls returns the node's eth0 settings ufpd changes while it
// owns the uplink (device.Dedicate).
func (l *lab) uplinkSysctls(node string) string {
	l.t.Helper()
	return strings.Join(strings.Fields(l.must(node, "sysctl", "-n",
		"net.ipv4.conf.eth0.arp_ignore", "net.ipv6.conf.eth0.disable_ipv6")), " ")
}

// tcpEcho serves TCP on addr in namespace ns, echoing every connection
// back, and registers its close.
func (l *lab) tcpEcho(ns, addr string) {
	l.t.Helper()
	echoOn(l.t, l.listen(ns, "tcp", addr))
}

// echoOn echoes every connection ln accepts back, and registers the
// close of ln and of the connections.
func echoOn(t *testing.T, ln net.Listener) {
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(c, c)
		}
	}()
}

// echoConn is a client connection to a tcpEcho server.
type echoConn struct {
	c net.Conn
	r *bufio.Reader
}

// echoConn connects from namespace ns to the echo server at addr and
// registers the connection's close.
func (l *lab) echoConn(ns, addr string) *echoConn {
	l.t.Helper()
	c, err := dialIn(ns, "tcp", addr)
	if err != nil {
		l.t.Fatalf("%s: %v", ns, err)
	}
	l.t.Cleanup(func() { c.Close() })
	return &echoConn{c: c, r: bufio.NewReader(c)}
}

// exchange sends msg and checks that it comes back, within labIOTimeout.
func (e *echoConn) exchange(msg string) error {
	e.c.SetDeadline(time.Now().Add(labIOTimeout))
	defer e.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(e.c, msg+"\n"); err != nil {
		return fmt.Errorf("echo %q: %w", msg, err)
	}
	line, err := e.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("echo %q: %w", msg, err)
	}
	if line != msg+"\n" {
		return fmt.Errorf("echo %q: got %q", msg, line)
	}
	return nil
}
