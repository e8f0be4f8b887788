package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/encap"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// nsTimeout bounds every exchange of a test.
const nsTimeout = 20 * time.Second

// nsHost is one gVisor stack on a switch port: a pod, or a host beyond the
// uplink.
type nsHost struct {
	name  string
	net   *netstack.Net
	port  *device.L3
	nic   *nsNIC
	addrs []netip.Addr
	link  device.Link
}

// addr returns the host's first address of the family of like.
func (h *nsHost) addr(v6 bool) netip.Addr {
	for _, a := range h.addrs {
		if a.Is6() == v6 {
			return a
		}
	}
	panic(fmt.Sprintf("%s has no address of that family", h.name))
}

// nsSwitch is a serving switch with gVisor hosts on its ports.
type nsSwitch struct {
	t     *testing.T
	sw    *vswitch.Switch
	cfg   *vswitch.Config
	hosts map[string]*nsHost
}

// newNSSwitch parses the HNS-level document policy with the package's own
// decoder and creates the switch. Serve starts it.
func newNSSwitch(t *testing.T, policy string) *nsSwitch {
	t.Helper()
	cfg, err := vswitch.ParseConfig([]byte(policy))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	sw, err := vswitch.New(cfg)
	if err != nil {
		t.Fatalf("switch: %v", err)
	}
	return &nsSwitch{t: t, sw: sw, cfg: cfg, hosts: map[string]*nsHost{}}
}

// attach puts a gVisor stack with the interface link on port.
func (s *nsSwitch) attach(port string, link device.Link, addrs []netip.Addr, mtu int) *nsHost {
	t := s.t
	t.Helper()
	dev, tnet, err := netstack.CreateNetTUN(addrs, nil, mtu)
	if err != nil {
		t.Fatalf("%s: netstack: %v", port, err)
	}
	nic := newNSNIC(dev)
	h := &nsHost{name: port, net: tnet, nic: nic, addrs: addrs, link: link}
	h.port = device.NewL3(nic, link)
	if err := s.sw.Attach(port, h.port); err != nil {
		h.port.Close()
		t.Fatalf("%s: %v", port, err)
	}
	t.Cleanup(func() { h.port.Close() }) // after Serve has ended (cleanups run last first)
	s.hosts[port] = h
	return h
}

// pod attaches a gVisor stack as the endpoint named name, with the
// interface the endpoint has in the policy (nsEndpointLink).
func (s *nsSwitch) pod(name string) *nsHost {
	s.t.Helper()
	link, addrs, mtu := nsEndpointLink(s.t, s.cfg, name)
	return s.attach(name, link, addrs, mtu)
}

// external attaches a gVisor stack with addresses addrs beyond the uplink
// (nsUplinkLink).
func (s *nsSwitch) external(addrs ...netip.Addr) *nsHost {
	s.t.Helper()
	link := nsUplinkLink(s.t, s.cfg)
	return s.attach(s.cfg.Uplink.Name, link, addrs, 1500)
}

// serve runs the switch until the test ends; Serve must then return nil.
func (s *nsSwitch) serve() {
	t := s.t
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.sw.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(nsTimeout):
			t.Errorf("Serve did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("switch drops: %s; no device: %d; device failures %d",
				s.sw.Pipeline().Drops.String(), s.sw.TxNoDevice(), s.sw.DeviceFailures())
			for _, h := range s.hosts {
				c := h.port.Counters()
				t.Logf("port %s: rx %d tx %d rxErr %d txErr %d txDropped %d nicDropped %d", h.name,
					c.RxFrames.Load(), c.TxFrames.Load(), c.RxErrors.Load(), c.TxErrors.Load(), c.TxDropped.Load(), h.nic.dropped.Load())
			}
		}
	})
}

// nsEndpointLink returns the interface endpoint name of the HNS-level policy
// cfg has, as a pod sees it, and its addresses and MTU. The L3 port's
// frames come from the endpoint's MacAddress and go to the MAC the switch
// routes with for the endpoint's network: for an Overlay network its
// distributed router (DrMacAddress), which the switch's gateway answers
// with; for L2Bridge the subnet gateway's own MAC, the router on the
// underlay that Uplink.Neighbors names (hns/hns.go, emit).
func nsEndpointLink(t *testing.T, cfg *vswitch.Config, name string) (device.Link, []netip.Addr, int) {
	t.Helper()
	i := slices.IndexFunc(cfg.Endpoints, func(e hns.EndpointConfig) bool { return e.Name == name })
	if i < 0 {
		t.Fatalf("no endpoint %q in the policy", name)
	}
	ep := cfg.Endpoints[i]
	mac, ok := dataplane.ParseMAC(ep.MacAddress)
	if !ok {
		t.Fatalf("endpoint %s: MacAddress %q", name, ep.MacAddress)
	}
	link := device.Link{Name: name, MAC: mac}
	var addrs []netip.Addr
	for _, ic := range ep.IpConfigurations {
		a := netip.MustParseAddr(ic.IpAddress)
		addrs = append(addrs, a)
		link.Addrs = append(link.Addrs, netip.PrefixFrom(a, int(ic.PrefixLength)))
	}
	n := cfg.Networks[slices.IndexFunc(cfg.Networks, func(n hns.NetworkConfig) bool { return n.Name == ep.HostComputeNetwork })]
	mtu := int(cfg.Uplink.Mtu)
	if mtu == 0 {
		mtu = hns.DefaultUplinkMTU
	}
	switch n.Type {
	case hns.TypeOverlay:
		for _, p := range n.Policies {
			if p.Type == "DrMacAddress" {
				var s hns.DrMacAddressSettings
				if err := json.Unmarshal(p.Settings, &s); err != nil {
					t.Fatal(err)
				}
				link.GatewayMAC, _ = dataplane.ParseMAC(s.Address)
			}
		}
		mtu -= encap.VXLANOverhead4
	case hns.TypeL2Bridge:
		// The gateway of the subnet of the endpoint's first address.
		for _, ipam := range n.Ipams {
			for _, sub := range ipam.Subnets {
				if !netip.MustParsePrefix(sub.IpAddressPrefix).Contains(addrs[0]) {
					continue
				}
				for _, r := range sub.Routes {
					link.GatewayMAC = nsNeighborMAC(t, cfg, r.NextHop)
				}
			}
		}
	}
	if link.GatewayMAC.IsZero() {
		t.Fatalf("endpoint %s: no gateway MAC found in the policy", name)
	}
	return link, addrs, mtu
}

// nsUplinkLink returns the interface of the hosts beyond the uplink: their
// frames come from the underlay router (the MAC of Uplink.DefaultGateway,
// else of the first neighbour) and go to the host's MAC on the underlay
// (Uplink.MacAddress), as the uplink's layers expect of frames arriving
// from the wire.
func nsUplinkLink(t *testing.T, cfg *vswitch.Config) device.Link {
	t.Helper()
	u := cfg.Uplink
	hostMAC, ok := dataplane.ParseMAC(u.MacAddress)
	if !ok {
		t.Fatalf("Uplink.MacAddress %q", u.MacAddress)
	}
	router := u.DefaultGateway
	if router == "" {
		router = u.Neighbors[0].IpAddress
	}
	return device.Link{Name: u.Name, MAC: nsNeighborMAC(t, cfg, router), GatewayMAC: hostMAC}
}

func nsNeighborMAC(t *testing.T, cfg *vswitch.Config, ip string) dataplane.MAC {
	t.Helper()
	for _, n := range cfg.Uplink.Neighbors {
		if n.IpAddress == ip {
			m, ok := dataplane.ParseMAC(n.MacAddress)
			if !ok {
				t.Fatalf("neighbour %s: MAC %q", ip, n.MacAddress)
			}
			return m
		}
	}
	t.Fatalf("no neighbour %s in Uplink.Neighbors", ip)
	return dataplane.MAC{}
}

// nsNIC puts a NIC's transmit ring in front of a gVisor stack's
// tun.Device. netstack's device answers some packets inline while it is
// written to (an ICMP echo, a TCP reset) and hands its output over only
// when its reader takes it, so a switch worker writing to it could wait on
// another worker that waits on it in turn. Writes here are queued (and
// dropped, counted, when the ring is full) and injected by a goroutine of
// the NIC's own. Close also reads what the stack still has to send while
// it closes, because netstack's Close would panic under a sender that is
// waiting for a reader.
type nsNIC struct {
	tun.Device
	ring    chan []byte
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	dropped atomic.Uint64
}

func newNSNIC(dev tun.Device) *nsNIC {
	n := &nsNIC{Device: dev, ring: make(chan []byte, 4096), stop: make(chan struct{}), stopped: make(chan struct{})}
	go n.inject()
	return n
}

func (n *nsNIC) inject() {
	defer close(n.stopped)
	bufs := make([][]byte, 1)
	for {
		select {
		case p := <-n.ring:
			bufs[0] = p
			n.Device.Write(bufs, 0)
		case <-n.stop:
			return
		}
	}
}

func (n *nsNIC) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-n.stop:
		return 0, os.ErrClosed
	default:
	}
	for _, b := range bufs {
		select {
		case n.ring <- bytes.Clone(b[offset:]):
		default:
			n.dropped.Add(1)
		}
	}
	return len(bufs), nil
}

func (n *nsNIC) Close() error {
	var err error
	n.once.Do(func() {
		go func() {
			bufs, sizes := [][]byte{make([]byte, 1<<16)}, []int{0}
			for {
				if _, err := n.Device.Read(bufs, sizes, 0); err != nil {
					return
				}
			}
		}()
		close(n.stop)
		<-n.stopped
		err = n.Device.Close()
	})
	return err
}

// nsRandom returns n random bytes.
func nsRandom(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// nsTCPServer serves TCP on h at ap until the test ends: each connection
// gets greeting (if any), then its data echoed back. It reports each
// connection's remote address on accepted.
func nsTCPServer(t *testing.T, h *nsHost, ap netip.AddrPort, greeting string) <-chan netip.AddrPort {
	t.Helper()
	ln, err := h.net.ListenTCPAddrPort(ap)
	if err != nil {
		t.Fatalf("%s: listen %s: %v", h.name, ap, err)
	}
	accepted := make(chan netip.AddrPort, 64)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- netip.MustParseAddrPort(c.RemoteAddr().String()):
			default:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * nsTimeout))
				if greeting != "" {
					if _, err := io.WriteString(c, greeting); err != nil {
						return
					}
				}
				io.Copy(c, c)
			}()
		}
	}()
	return accepted
}

// nsEchoTCP dials to from h, reads the greeting of length greetLen, sends
// data and checks it comes back whole. It returns the greeting.
func nsEchoTCP(t *testing.T, h *nsHost, to netip.AddrPort, greetLen int, data []byte) (string, error) {
	return nsEchoTCPPaused(t, h, to, greetLen, data, nil)
}

// nsEchoTCPPaused is nsEchoTCP that calls pause(sent) after each chunk of
// data it sends, to let a test act while the connection is in the middle
// of its transfer.
func nsEchoTCPPaused(t *testing.T, h *nsHost, to netip.AddrPort, greetLen int, data []byte, pause func(sent int)) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nsTimeout)
	defer cancel()
	c, err := h.net.DialContextTCPAddrPort(ctx, to)
	if err != nil {
		return "", fmt.Errorf("%s: dial %s: %w", h.name, to, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * nsTimeout))
	greet := make([]byte, greetLen)
	if _, err := io.ReadFull(c, greet); err != nil {
		return "", fmt.Errorf("%s: greeting from %s: %w", h.name, to, err)
	}
	werr := make(chan error, 1)
	go func() {
		const chunk = 64 << 10
		for sent := 0; sent < len(data); {
			n, err := c.Write(data[sent:min(sent+chunk, len(data))])
			sent += n
			if err != nil {
				werr <- err
				return
			}
			if pause != nil {
				pause(sent)
			}
		}
		werr <- nil
	}()
	back := make([]byte, len(data))
	for got := 0; got < len(back); {
		n, err := c.Read(back[got:])
		got += n
		if err != nil {
			return "", fmt.Errorf("%s: echo from %s after %d of %d bytes: %w", h.name, to, got, len(data), err)
		}
	}
	if err := <-werr; err != nil {
		return "", fmt.Errorf("%s: send to %s: %w", h.name, to, err)
	}
	if !bytes.Equal(back, data) {
		return "", fmt.Errorf("%s: the data echoed by %s differs from what was sent", h.name, to)
	}
	return string(greet), nil
}

// nsUDPServer answers each datagram to ap on h with reply followed by the
// datagram, and reports the sources it saw.
func nsUDPServer(t *testing.T, h *nsHost, ap netip.AddrPort, reply string) <-chan netip.AddrPort {
	t.Helper()
	c, err := h.net.ListenUDPAddrPort(ap)
	if err != nil {
		t.Fatalf("%s: listen udp %s: %v", h.name, ap, err)
	}
	seen := make(chan netip.AddrPort, 64)
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			src := netip.MustParseAddrPort(from.String())
			select {
			case seen <- src:
			default:
			}
			c.WriteTo(append([]byte(reply), buf[:n]...), from)
		}
	}()
	return seen
}

// nsUDPExchange sends a request from h to to and returns the answer,
// retrying a few times (UDP may be lost).
func nsUDPExchange(t *testing.T, h *nsHost, to netip.AddrPort, req string) (string, error) {
	t.Helper()
	c, err := h.net.DialUDPAddrPort(netip.AddrPort{}, to)
	if err != nil {
		return "", fmt.Errorf("%s: udp dial %s: %w", h.name, to, err)
	}
	defer c.Close()
	buf := make([]byte, 2048)
	var last error
	for range 5 {
		if _, err := c.Write([]byte(req)); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			return string(buf[:n]), nil
		}
		last = err
	}
	return "", fmt.Errorf("%s: no UDP answer from %s: %w", h.name, to, last)
}

// nsPing sends ICMP echo requests from h to dst until one is answered.
//
// netstack's PingConn.Read only wakes for a packet that arrives at an
// empty queue while it waits (a reply that came before Read is never
// seen, nor any after it), so the reader waits before the request goes,
// and a lost reply is retried on a new socket.
func nsPing(t *testing.T, h *nsHost, dst netip.Addr) error {
	t.Helper()
	src := h.addr(dst.Is6())
	var last error
	for seq := range 5 {
		c, err := h.net.DialPingAddr(src, dst)
		if err != nil {
			return fmt.Errorf("%s: ping socket: %w", h.name, err)
		}
		req := []byte{8, 0, 0, 0, 0, 0, 0, byte(seq + 1), 'u', 'f', 'p', '-', 'e', '2', 'e'}
		want := byte(0)
		if dst.Is6() {
			req[0], want = 128, 129
		}
		got := make(chan error, 1)
		go func() {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 256)
			for {
				n, from, err := c.ReadFrom(buf)
				if err != nil {
					got <- err
					return
				}
				if from.(*netstack.PingAddr).Addr() != dst {
					continue
				}
				if n >= 8 && buf[0] == want && bytes.Equal(buf[8:n], req[8:]) {
					got <- nil
					return
				}
			}
		}()
		time.Sleep(10 * time.Millisecond) // let the reader wait
		if _, err := c.Write(req); err != nil {
			c.Close()
			return fmt.Errorf("%s: ping %s: %w", h.name, dst, err)
		}
		last = <-got
		c.Close()
		if last == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: no echo reply from %s: %w", h.name, dst, last)
}

// nsRecv takes the next value from c, or fails the test after nsTimeout.
func nsRecv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(nsTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
