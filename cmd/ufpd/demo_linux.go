package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/device"
)

// The demo's namespaces: two pods, the node (the host's vNIC and the
// uplink's interface) and a host outside the cluster behind the uplink.
const (
	nsPodA = "ufpdemo-pod-a"
	nsPodB = "ufpdemo-pod-b"
	nsNode = "ufpdemo-node"
	nsExt  = "ufpdemo-ext"

	ipPodA  = "10.244.1.10"
	ipPodB  = "10.244.1.11"
	ipNode  = "192.168.50.1"
	ipExt   = "192.168.50.254"
	ipVIP   = "10.96.0.10"
	macExt  = "02:00:00:00:00:99"
	demoDur = 2 * time.Second
)

var demoNamespaces = []string{nsPodA, nsPodB, nsNode, nsExt}

// demo builds the demo topology, runs traffic through ufpd, prints what
// happened and removes everything it made.
func demo(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("ufpd demo", flag.ContinueOnError)
	fl.SetOutput(stderr)
	verbose := fl.Bool("v", false, "show ufpd's log")
	keep := fl.Bool("keep", false, "after the steps, keep the topology and ufpd running until interrupted, its API on -api (look around with ufpctl and ip netns exec)")
	apiSocket := fl.String("api", api.DefaultSocket, "with -keep, the API's Unix socket")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: ufpd demo [-v] [-keep [-api SOCKET]]\n\n"+
			"With root: creates network namespaces %s, wires two pods, the node's\n"+
			"own vNIC and an outside host through ufpd (its embedded demo.json),\n"+
			"runs ping, a TCP transfer, a Service and NAT through it, prints what\n"+
			"happened and removes everything it created.\n\n", strings.Join(demoNamespaces, ", "))
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "ufpd demo: needs root (it creates network namespaces and TAP devices): run it with sudo")
		return 2
	}
	for _, ns := range demoNamespaces {
		if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
			fmt.Fprintf(stderr, "ufpd demo: namespace %s exists already (a demo is running, or one was killed): remove it with `ip netns del %s`\n", ns, ns)
			return 1
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	sock := ""
	if *keep {
		sock = *apiSocket
	}
	if err := runDemo(stdout, log, *keep, sock); err != nil {
		fmt.Fprintf(stderr, "ufpd demo: %v\n", err)
		return 1
	}
	return 0
}

func runDemo(w io.Writer, log *slog.Logger, keep bool, apiSocket string) (err error) {
	var made []string
	defer func() {
		for _, ns := range made {
			if out, e := exec.Command("ip", "netns", "del", ns).CombinedOutput(); e != nil {
				err = errors.Join(err, fmt.Errorf("removing namespace %s: %v: %s", ns, e, out))
			}
		}
		if len(made) > 0 {
			fmt.Fprintf(w, "\nremoved namespaces %s and every device in them\n", strings.Join(made, ", "))
		}
	}()
	for _, ns := range demoNamespaces {
		if err := ipCmd("netns", "add", ns); err != nil {
			return err
		}
		made = append(made, ns)
		if err := ipCmd("-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	// The underlay: a veth from the node (the uplink's interface, no
	// address: the node's address is on its vNIC) to the outside host.
	for _, args := range [][]string{
		{"link", "add", "eth0", "netns", nsNode, "type", "veth", "peer", "name", "eth0", "netns", nsExt},
		{"-n", nsExt, "link", "set", "eth0", "address", macExt},
		{"-n", nsExt, "addr", "add", ipExt + "/24", "dev", "eth0"},
		{"-n", nsExt, "link", "set", "eth0", "up"},
		{"-n", nsNode, "link", "set", "eth0", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	c, err := parseConfig(demoConfig)
	if err != nil {
		return fmt.Errorf("the embedded demo.json: %w", err)
	}
	var apiL net.Listener
	if apiSocket != "" {
		if apiL, err = listenAPI(apiSocket); err != nil {
			return err
		}
	}
	d, err := newDaemon(c, log)
	if err != nil {
		if apiL != nil {
			apiL.Close()
		}
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 2)
	go func() { served <- d.serve(ctx) }()
	if apiL != nil {
		go func() { served <- d.serveAPI(ctx, apiL) }()
	}
	defer func() {
		cancel()
		err = errors.Join(err, <-served)
		if apiL != nil {
			err = errors.Join(err, <-served)
		}
	}()
	fmt.Fprintf(w, "ufpd demo: pods %s (%s) and %s (%s), the node %s on its vNIC, an outside host %s behind the uplink\n",
		"pod-a", ipPodA, "pod-b", ipPodB, ipNode, ipExt)
	fmt.Fprintf(w, "policy: overlay network flannel.4096 (VNI 4096), outbound NAT to %s, Service %s:80 -> pod-b:8080 (DSR),\n"+
		"        ACL deny-ssh on pod-b: TCP port 22 in is blocked\n\n", ipNode, ipVIP)
	time.Sleep(500 * time.Millisecond) // the first frame on a new TAP can be lost (FIELD-NOTES)

	steps := []struct {
		what string
		run  func() (string, error)
	}{
		{"ping pod-a -> pod-b", func() (string, error) { return ping(nsPodA, ipPodB, 5) }},
		{"TCP pod-a -> pod-b:5201", func() (string, error) { return transfer(nsPodA, nsPodB, ipPodB+":5201", ipPodB+":5201", demoDur) }},
		{"TCP pod-a -> Service " + ipVIP + ":80", func() (string, error) { return transfer(nsPodA, nsPodB, ipPodB+":8080", ipVIP+":80", demoDur/4) }},
		{"TCP pod-a -> outside " + ipExt + ":9000 (NAT)", func() (string, error) { return transfer(nsPodA, nsExt, ipExt+":9000", ipExt+":9000", demoDur/4) }},
		{"ping node -> pod-a", func() (string, error) { return ping(nsNode, ipPodA, 3) }},
		{"ping pod-b -> node", func() (string, error) { return ping(nsPodB, ipNode, 3) }},
		{"ping pod-a -> outside (NAT)", func() (string, error) { return ping(nsPodA, ipExt, 3) }},
		{"TCP pod-a -> pod-b:22 (ACL deny-ssh)", func() (string, error) { return blocked(nsPodA, nsPodB, ipPodB+":22") }},
	}
	failed := 0
	for _, s := range steps {
		res, err := s.run()
		mark := "ok  "
		if err != nil {
			mark, res = "FAIL", err.Error()
			failed++
		}
		fmt.Fprintf(w, "%s %-48s %s\n", mark, s.what, res)
	}
	sw := d.sw
	drops := sw.Pipeline().Drops.String()
	if drops == "" {
		drops = "none"
	}
	fmt.Fprintf(w, "\nswitch: %d flows cached, drops: %s\n", sw.Pipeline().FlowTable().Len(), drops)
	for _, st := range sw.Devices() {
		fmt.Fprintf(w, "  port %-10s rx %7d frames  tx %7d frames  tx errors %d\n", st.Port, st.RxFrames, st.TxFrames, st.TxErrors)
	}
	if keep {
		fmt.Fprintf(w, "\nthe topology and ufpd stay up, the API on %s; interrupt to remove them. Try:\n"+
			"  ufpctl ports\n"+
			"  ufpctl trace pod-a tcp %s:40000 %s:22     # why the SSH attempt was dropped\n"+
			"  ip netns exec %s ping %s\n", apiSocket, ipPodA, ipPodB, nsPodA, ipPodB)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		signal.Stop(sig)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d steps failed", failed, len(steps))
	}
	return nil
}

// blocked checks that a TCP connection from namespace client to addr,
// listened on in namespace server, is not let through: the SYN is
// dropped, so the dial times out, and the listener accepts nothing.
func blocked(client, server, addr string) (string, error) {
	var ln net.Listener
	if err := device.InNetNS(nsPath(server), func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return "", err
	}
	defer ln.Close()
	var c net.Conn
	err := device.InNetNS(nsPath(client), func() (err error) {
		c, err = net.DialTimeout("tcp", addr, time.Second)
		return err
	})
	if err == nil {
		c.Close()
		return "", fmt.Errorf("connected to %s: the ACL let it through", addr)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		return "", fmt.Errorf("dial %s: %w (want a timeout: the SYN dropped)", addr, err)
	}
	return "no answer within 1 s: dropped, as the ACL says", nil
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nsPath(ns string) string { return "/var/run/netns/" + ns }

// ping sends count ICMP echo requests from namespace ns to dst and reports
// the replies and their round-trip times.
func ping(ns, dst string, count int) (string, error) {
	var c *icmp.PacketConn
	if err := device.InNetNS(nsPath(ns), func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	to := &net.IPAddr{IP: net.ParseIP(dst)}
	var rtts []time.Duration
	buf := make([]byte, 1500)
	id := os.Getpid() & 0xffff
	for seq := 1; seq <= count; seq++ {
		m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("ufpd demo")}}
		b, _ := m.Marshal(nil)
		start := time.Now()
		if _, err := c.WriteTo(b, to); err != nil {
			return "", err
		}
		c.SetReadDeadline(start.Add(time.Second))
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break // lost
			}
			r, err := icmp.ParseMessage(1, buf[:n])
			if e, ok := r.Body.(*icmp.Echo); err == nil && ok && r.Type == ipv4.ICMPTypeEchoReply && e.ID == id && e.Seq == seq && from.String() == dst {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
	}
	if len(rtts) == 0 {
		return "", fmt.Errorf("%d echo requests to %s, no reply", count, dst)
	}
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	res := fmt.Sprintf("%d/%d replies, average %.3f ms", len(rtts), count, float64(sum.Microseconds())/float64(len(rtts))/1000)
	if len(rtts) < count {
		return "", errors.New(res)
	}
	return res, nil
}

// transfer sends data for dur over TCP from namespace client to addr,
// served by a listener on listen (an address and port) in namespace
// server, and reports the throughput and the client address the server
// saw.
func transfer(client, server, listen, addr string, dur time.Duration) (string, error) {
	var ln net.Listener
	if err := device.InNetNS(nsPath(server), func() (err error) {
		ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		return "", err
	}
	defer ln.Close()
	type result struct {
		n    int64
		peer string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		got <- result{n, c.RemoteAddr().(*net.TCPAddr).IP.String(), err}
	}()
	var c net.Conn
	if err := device.InNetNS(nsPath(client), func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 3*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	buf := make([]byte, 64<<10)
	start := time.Now()
	var sent int64
	for time.Since(start) < dur {
		c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			c.Close()
			return "", fmt.Errorf("after %d bytes: %w", sent, err)
		}
	}
	c.Close()
	var r result
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		return "", errors.New("the server did not see the end of the stream")
	}
	if r.err != nil {
		return "", r.err
	}
	if r.n != sent {
		return "", fmt.Errorf("sent %d bytes, %d arrived", sent, r.n)
	}
	secs := time.Since(start).Seconds()
	return fmt.Sprintf("%d MiB in %.1f s, %.2f Gbit/s; the server saw the client as %s", sent>>20, secs, float64(sent)*8/secs/1e9, r.peer), nil
}
