package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ufpdPolicy is the switch's policy, HNS level: one Overlay network with
// the two pods. Each pod has an OutBoundNAT policy whose exceptions cover
// the pod network, so pod-to-pod traffic crosses the NAT layer untranslated,
// and ACLs (pod A: no outbound SMTP; pod B: allow the pod network in, deny
// the rest), so it crosses the ACL layers too. The uplink's MTU of 1550
// leaves the pods 1500 after VXLAN's 50 bytes, the bridge pods' MTU. The
// uplink gets no device: nothing leaves the switch.
//
//go:embed ufpd-policy.json
var ufpdPolicy []byte

// The pods' ports in ufpdPolicy.
const (
	ufpdPortA = "pod-a"
	ufpdPortB = "pod-b"
)

// ufpdConfig is ufpd's configuration file (docs/UFPD.md).
type ufpdConfig struct {
	Policy  json.RawMessage `json:"policy"`
	Devices []ufpdDevice    `json:"devices"`
	Log     ufpdLog         `json:"log"`
}

type ufpdDevice struct {
	Port  string `json:"port"`
	Type  string `json:"type"`
	Name  string `json:"name,omitempty"` // afpacket: the existing interface
	NetNS string `json:"netns"`
}

type ufpdLog struct {
	Level string `json:"level"`
}

// ufpdConfigFile returns the configuration that gives pod A's port a TAP
// in namespace podA and pod B's one in podB.
func ufpdConfigFile(podA, podB string) ([]byte, error) {
	c := ufpdConfig{
		Policy: ufpdPolicy,
		Devices: []ufpdDevice{
			{Port: ufpdPortA, Type: "tap", NetNS: podA},
			{Port: ufpdPortB, Type: "tap", NetNS: podB},
		},
		Log: ufpdLog{Level: "info"},
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("ufpd configuration: %w", err)
	}
	return append(b, '\n'), nil
}

// buildUFPD builds cmd/ufpd into dir and returns the binary's path.
func buildUFPD(ctx context.Context, r *runner, dir string) (string, error) {
	bin := filepath.Join(dir, "ufpd")
	if _, err := r.output(ctx, buildTimeout, "go", "build", "-o", bin, "github.com/ufp-dev/ufp/cmd/ufpd"); err != nil {
		return "", fmt.Errorf("building ufpd (run the harness inside the ufp module): %w", err)
	}
	return bin, nil
}

// setupUFPD builds the ufpd testbed of the pair topology: two pod
// namespaces, and ufpd (the binary l.ufpd) running as a child process on
// a generated configuration that gives each pod a TAP as its eth0. The
// teardown stops ufpd by its PID with SIGTERM (it then removes its TAPs)
// before it deletes the namespaces.
func setupUFPD(ctx context.Context, l *lab) (*testbed, error) {
	b := &testbed{name: swUFPD, podA: nsName(l.id, "ufpd-a"), podB: nsName(l.id, "ufpd-b"), target: podBIP}
	for _, ns := range []string{b.podA, b.podB} {
		if err := addNetns(ctx, l.r, l.td, ns); err != nil {
			return nil, err
		}
	}
	cfg, err := ufpdConfigFile(b.podA, b.podB)
	if err != nil {
		return nil, err
	}
	c, alive, err := startUFPD(ctx, l, "ufpd", cfg)
	if err != nil {
		return nil, err
	}
	b.switchPIDs, b.alive = []int{c.pid()}, alive
	for _, ns := range []string{b.podA, b.podB} {
		if err := replaceUFPDRoute(ctx, l.r, ns, alive, nil); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// startUFPD writes the configuration cfg to name.json in the work
// directory, checks it with ufpd -check and starts ufpd on it, logging to
// name.log. It returns the process and a function that reports an error
// once it has exited. The teardown stops it.
func startUFPD(ctx context.Context, l *lab, name string, cfg []byte) (*child, func() error, error) {
	cfgPath := filepath.Join(l.work, name+".json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, nil, fmt.Errorf("%s configuration: %w", name, err)
	}
	if _, err := l.r.output(ctx, ipTimeout, l.ufpd, "-check", "-config", cfgPath); err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(l.work, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%s log: %w", name, err)
	}
	l.td.push("close "+logPath, log.Close)
	c, err := l.r.start([]string{l.ufpd, "-config", cfgPath}, log, log)
	if err != nil {
		return nil, nil, err
	}
	l.td.push(fmt.Sprintf("stop %s (pid %d)", name, c.pid()), func() error { return stopUFPD(c, logPath) })
	alive := func() error {
		if c.exited() {
			return fmt.Errorf("%s (ufpd) exited (%v); the end of its log:\n%s", name, c.err, fileTail(logPath, 10))
		}
		return nil
	}
	return c, alive, nil
}

// stopUFPD stops ufpd and reports an exit other than the clean one on
// SIGTERM (status 0: it removed its interfaces).
func stopUFPD(c *child, logPath string) error {
	if err := c.stop(); err != nil {
		return err
	}
	if c.err != nil {
		return fmt.Errorf("ufpd exited with %v; the end of its log:\n%s", c.err, fileTail(logPath, 10))
	}
	return nil
}

// replaceUFPDRoute waits until ufpd has set up the pod's eth0 in
// namespace ns (its default route is the last step) and removes that
// default route: the pods need no route out. When route is not empty it
// is added instead (ip route add ROUTE...), for the pod network on the
// overlay.
func replaceUFPDRoute(ctx context.Context, r *runner, ns string, alive func() error, route []string) error {
	deadline := time.Now().Add(readyLimit)
	for {
		out, err := r.output(ctx, ipTimeout, "ip", "-n", ns, "route", "show", "default")
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			if err := r.ip(ctx, "-n", ns, "route", "del", "default"); err != nil {
				return err
			}
			if len(route) == 0 {
				return nil
			}
			return r.ip(ctx, append([]string{"-n", ns, "route", "add"}, route...)...)
		}
		if e := alive(); e != nil {
			return e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ufpd has not set up %s in %s after %v", podIfName, ns, readyLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fileTail returns the last n lines of the file at path, for error
// messages.
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
