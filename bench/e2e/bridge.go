package main

import (
	"context"
	"fmt"
)

// setupBridge builds the bridge testbed: a switch namespace with a Linux
// bridge, and two pod namespaces, each with an eth0 that is a veth into
// the bridge. Offloads stay as the kernel sets them; no namespace has a
// route out.
func setupBridge(ctx context.Context, l *lab) (*testbed, error) {
	r := l.r
	b := &testbed{name: swBridge, podA: nsName(l.id, "br-a"), podB: nsName(l.id, "br-b"), target: podBIP}
	sw := nsName(l.id, "br-sw")
	for _, ns := range []string{sw, b.podA, b.podB} {
		if err := addNetns(ctx, r, l.td, ns); err != nil {
			return nil, err
		}
	}
	if err := runIP(ctx, r,
		[]string{"-n", sw, "link", "add", "br0", "type", "bridge"},
		[]string{"-n", sw, "link", "set", "br0", "up"},
	); err != nil {
		return nil, err
	}
	pods := []struct{ ns, port, ip, mac string }{
		{b.podA, "va", podAIP, podAMAC},
		{b.podB, "vb", podBIP, podBMAC},
	}
	for _, p := range pods {
		if err := attachPod(ctx, r, sw, p.ns, p.port, p.ip+podPrefix, p.mac); err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.ns, err)
		}
	}
	return b, nil
}

// attachPod gives namespace ns an eth0 with address cidr (address and
// prefix length) and MAC mac, a veth whose peer port is a port of br0 in
// namespace sw.
func attachPod(ctx context.Context, r *runner, sw, ns, port, cidr, mac string) error {
	if err := addPodVeth(ctx, r, sw, ns, port, cidr, mac); err != nil {
		return err
	}
	return r.ip(ctx, "-n", sw, "link", "set", port, "master", "br0")
}

// addPodVeth gives namespace ns an eth0 with address cidr and MAC mac,
// a veth whose peer is port in namespace sw; both ends are up.
func addPodVeth(ctx context.Context, r *runner, sw, ns, port, cidr, mac string) error {
	return runIP(ctx, r,
		[]string{"link", "add", podIfName, "netns", ns, "address", mac, "type", "veth", "peer", "name", port, "netns", sw},
		[]string{"-n", sw, "link", "set", port, "up"},
		[]string{"-n", ns, "addr", "add", cidr, "dev", podIfName},
		[]string{"-n", ns, "link", "set", podIfName, "up"},
	)
}

// runIP runs ip with each argument list in turn, stopping at the first
// error.
func runIP(ctx context.Context, r *runner, cmds ...[]string) error {
	for _, args := range cmds {
		if err := r.ip(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}
