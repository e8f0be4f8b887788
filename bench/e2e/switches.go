package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The switches under test, by the name -switches takes, in their default
// order within a round. The first is the one under study: the ratios are
// of it to each of the others.
const (
	swUFPD     = "ufpd"      // ufpd, built from this repository
	swBridge   = "bridge"    // the kernel: a Linux bridge (and on the overlay a VXLAN device in it)
	swOVSTap   = "ovs-tap"   // Open vSwitch, userspace (netdev) datapath, pods on TAP ports
	swOVSTSO   = "ovs-tso"   // the same with userspace TSO
	swOVSAFXDP = "ovs-afxdp" // Open vSwitch, userspace datapath, pods on veths through AF_XDP ports
)

// switchNames are every switch the harness knows, in the default order.
var switchNames = []string{swUFPD, swBridge, swOVSTap, swOVSTSO, swOVSAFXDP}

// isOVS reports whether switch name is one of Open vSwitch's.
func isOVS(name string) bool { return strings.HasPrefix(name, "ovs-") }

// The topologies, by the name -topology takes.
const (
	topoPair    = "pair"    // pod A, switch, pod B on one node
	topoOverlay = "overlay" // pod A on node 1, pod B on node 2, VXLAN between them
)

// parseSwitches returns the switches a -switches value names, in the
// order given: a comma-separated list of switchNames, or "all" (or empty)
// for all of them. explicit is false for "all": switches whose tools are
// missing are then left out with a note rather than failing the run.
func parseSwitches(s string) (names []string, explicit bool, err error) {
	if s == "" || s == "all" {
		return slices.Clone(switchNames), false, nil
	}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		switch {
		case !slices.Contains(switchNames, n):
			return nil, true, fmt.Errorf("-switches: %q is not a switch (%s, or all)", n, strings.Join(switchNames, ", "))
		case slices.Contains(names, n):
			return nil, true, fmt.Errorf("-switches: %s is named twice", n)
		}
		names = append(names, n)
	}
	return names, true, nil
}

// parseTopology returns the topologies a -topology value names: pair,
// overlay, or both (pair first).
func parseTopology(s string) ([]string, error) {
	switch s {
	case topoPair, topoOverlay:
		return []string{s}, nil
	case "both":
		return []string{topoPair, topoOverlay}, nil
	}
	return nil, fmt.Errorf("-topology: %q is not pair, overlay or both", s)
}

// tool is a program the harness runs, with the Debian package that has
// it.
type tool struct{ cmd, pkg string }

// requiredTools are the programs every run needs.
var requiredTools = []tool{
	{"ip", "iproute2"},
	{"ss", "iproute2"},
	{"iperf3", "iperf3"},
	{"ping", "iputils-ping"},
}

// switchTools are the programs a switch under test needs besides
// requiredTools.
var switchTools = map[string][]tool{
	swUFPD:     {{"go", "golang (the Go toolchain that builds ufpd)"}},
	swOVSTap:   ovsTools,
	swOVSTSO:   ovsTools,
	swOVSAFXDP: append(slices.Clip(ovsTools), tool{"ethtool", "ethtool"}),
}

// ovsTools are Open vSwitch's programs the harness runs.
var ovsTools = []tool{
	{"ovsdb-tool", "openvswitch-switch"},
	{"ovsdb-server", "openvswitch-switch"},
	{"ovs-vswitchd", "openvswitch-switch"},
	{"ovs-vsctl", "openvswitch-switch"},
	{"ovs-appctl", "openvswitch-switch"},
}

// missingTools returns the tools of list that lookPath cannot find.
func missingTools(list []tool, lookPath func(string) (string, error)) []tool {
	var miss []tool
	for _, t := range list {
		if _, err := lookPath(t.cmd); err != nil {
			miss = append(miss, t)
		}
	}
	return miss
}

// installHint returns the apt-get command that installs the packages of
// tools (the Go toolchain is not a Debian package the harness asks for).
func installHint(tools []tool) string {
	var pkgs []string
	for _, t := range tools {
		if t.cmd != "go" && !slices.Contains(pkgs, t.pkg) {
			pkgs = append(pkgs, t.pkg)
		}
	}
	if len(pkgs) == 0 {
		return ""
	}
	return "apt-get install -y " + strings.Join(pkgs, " ")
}

// checkPrerequisites reports what is missing to run the benchmark on the
// switches asked for: root (unless root is true), and the programs it
// runs (found with lookPath), with what to install. When the switches
// were not named (explicit false), a switch whose own tools are missing
// is left out and described in notes; otherwise it is an error. It
// returns the switches that can run.
func checkPrerequisites(switches []string, explicit, root bool, lookPath func(string) (string, error)) (run []string, notes []string, err error) {
	var errs []error
	if !root {
		errs = append(errs, errors.New("needs root (it creates network namespaces and runs the switches): run it with sudo"))
	}
	var missing []tool
	for _, t := range missingTools(requiredTools, lookPath) {
		errs = append(errs, fmt.Errorf("%s not found (package %s)", t.cmd, t.pkg))
		missing = append(missing, t)
	}
	for _, sw := range switches {
		miss := missingTools(switchTools[sw], lookPath)
		if len(miss) == 0 {
			run = append(run, sw)
			continue
		}
		var names []string
		for _, t := range miss {
			names = append(names, t.cmd)
		}
		if !explicit {
			note := fmt.Sprintf("%s: not run: %s not found", sw, strings.Join(names, ", "))
			if h := installHint(miss); h != "" {
				note += " (" + h + ")"
			}
			notes = append(notes, note)
			continue
		}
		for _, t := range miss {
			if !slices.Contains(missing, t) {
				errs = append(errs, fmt.Errorf("%s not found (needed by %s; package %s)", t.cmd, sw, t.pkg))
				missing = append(missing, t)
			}
		}
	}
	if h := installHint(missing); h != "" {
		errs = append(errs, fmt.Errorf("install with: %s", h))
	}
	if len(errs) == 0 && len(run) == 0 {
		errs = append(errs, errors.New("no switch left to measure"))
	}
	return run, notes, errors.Join(errs...)
}

// skipError says why a switch is not measured on a topology (a feature
// the installed version lacks); the run goes on without it.
type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

// skip returns a skipError with the formatted reason.
func skip(format string, args ...any) error {
	return &skipError{reason: fmt.Sprintf(format, args...)}
}

// lab is what the testbeds of one topology are built with: the run's
// commands, undo list, names and files.
type lab struct {
	r    *runner
	td   *teardown
	id   string // the run id, in every namespace name
	work string // the run's work directory
	ufpd string // the ufpd binary; empty when ufpd is not measured
	ovs  ovsVersion
}

// setupFunc builds one switch's testbed on a topology.
type setupFunc func(ctx context.Context, l *lab) (*testbed, error)

// setups returns the function that builds switch sw's testbed on
// topology topo.
func setups(topo, sw string) setupFunc {
	pair := map[string]setupFunc{
		swUFPD:     setupUFPD,
		swBridge:   setupBridge,
		swOVSTap:   func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSPair(ctx, l, swOVSTap) },
		swOVSTSO:   func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSPair(ctx, l, swOVSTSO) },
		swOVSAFXDP: func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSPair(ctx, l, swOVSAFXDP) },
	}
	overlay := map[string]setupFunc{
		swUFPD:     setupUFPDOverlay,
		swBridge:   setupKernelOverlay,
		swOVSTap:   func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSOverlay(ctx, l, swOVSTap) },
		swOVSTSO:   func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSOverlay(ctx, l, swOVSTSO) },
		swOVSAFXDP: func(ctx context.Context, l *lab) (*testbed, error) { return setupOVSOverlay(ctx, l, swOVSAFXDP) },
	}
	if topo == topoOverlay {
		return overlay[sw]
	}
	return pair[sw]
}
