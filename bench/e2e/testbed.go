package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The two pods of every testbed of the pair topology: the same addresses
// and MACs on each switch (ufpd-policy.json has them too). Pod A sends,
// pod B receives. The overlay topology's are in overlay.go.
const (
	podAIP     = "10.244.1.10"
	podBIP     = "10.244.1.11"
	podPrefix  = "/24"
	podAMAC    = "02:00:00:00:01:0a"
	podBMAC    = "02:00:00:00:01:0b"
	podIfName  = "eth0"
	iperfPort  = "5201"
	readyLimit = 10 * time.Second // for interfaces, reachability, the iperf3 server
)

// testbed is one switch under test with its two pods: namespaces podA
// and podB, each with an eth0 on the switch (on one node, or on two
// joined by an underlay).
type testbed struct {
	name       string // a switch name (switchNames)
	podA, podB string // namespace names
	target     string // pod B's address, which pod A's tests go to
	// switchPIDs are the switch's processes (one per node), whose CPU
	// time is measured and summed; none when the switch is the kernel's.
	switchPIDs []int
	// alive reports an error once a switch process is gone; nil for
	// the kernel's.
	alive func() error
	// idle and wake, when set, park a switch that polls (Open vSwitch's
	// AF_XDP threads spin on a core) while the other testbeds are
	// measured, and bring it back before its own round.
	idle, wake func() error
	// datapath, when set, returns how many packets the switch's
	// datapath has looked up so far (Open vSwitch's hit+missed, summed
	// over the nodes): a check that the traffic really crosses it.
	datapath func(ctx context.Context) (uint64, error)
}

// prepare makes the testbed ready to measure: pod B is reachable from
// pod A, and an iperf3 server runs in pod B (stopped by the teardown).
// topo names the topology, for the server's log file.
func (b *testbed) prepare(ctx context.Context, r *runner, td *teardown, work, topo string) error {
	if err := b.waitReachable(ctx, r); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(work, topo+"-"+b.name+"-iperf3-server.log"))
	if err != nil {
		return fmt.Errorf("iperf3 server log: %w", err)
	}
	td.push("close "+log.Name(), log.Close)
	srv, err := r.start(inNetns(b.podB, "iperf3", "-s", "-p", iperfPort), log, log)
	if err != nil {
		return err
	}
	td.push(fmt.Sprintf("stop the iperf3 server (pid %d) in %s", srv.pid(), b.podB), srv.stop)
	return b.waitListening(ctx, r, srv)
}

// inNetns returns argv run in namespace ns. ip netns exec replaces itself
// with the program, so the child's PID is the program's.
func inNetns(ns string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// waitReachable pings pod B from pod A until it answers (which also fills
// the pods' neighbour tables; the first frame through a new TAP can be
// lost).
func (b *testbed) waitReachable(ctx context.Context, r *runner) error {
	deadline := time.Now().Add(readyLimit)
	for {
		_, err := r.output(ctx, 3*time.Second, inNetns(b.podA, "ping", "-c", "1", "-W", "1", b.target)...)
		if err == nil {
			return nil
		}
		if b.alive != nil {
			if e := b.alive(); e != nil {
				return e
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pod B (%s) does not answer pod A's ping after %v: %w", b.target, readyLimit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitListening waits until the iperf3 server in pod B listens.
func (b *testbed) waitListening(ctx context.Context, r *runner, srv *child) error {
	deadline := time.Now().Add(readyLimit)
	for {
		out, err := r.output(ctx, ipTimeout, "ss", "-N", b.podB, "-Hltn", "sport = :"+iperfPort)
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return nil
		}
		if srv.exited() {
			return fmt.Errorf("the iperf3 server in %s exited: %v", b.podB, srv.err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the iperf3 server in %s does not listen on port %s after %v", b.podB, iperfPort, readyLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpuTime returns the CPU time (user and system, all threads) the switch
// processes have used so far, summed. ok is false when the switch is the
// kernel's.
func (b *testbed) cpuTime() (d time.Duration, ok bool, err error) {
	if len(b.switchPIDs) == 0 {
		return 0, false, nil
	}
	var ticks uint64
	for _, pid := range b.switchPIDs {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, true, fmt.Errorf("%s CPU time: %w", b.name, err)
		}
		t, err := parseProcStatTicks(stat)
		if err != nil {
			return 0, true, fmt.Errorf("%s CPU time: /proc/%d/stat: %w", b.name, pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks), true, nil
}

// clockTicks is the unit of utime and stime in /proc/PID/stat
// (sysconf(_SC_CLK_TCK)): USER_HZ, 100 on every Linux architecture Go
// supports.
const clockTicks = 100

// parseProcStatTicks returns utime+stime, in clock ticks, from the
// content of /proc/PID/stat. The command name (field 2) is in parentheses
// and may hold spaces and parentheses itself, so fields are counted after
// its last ')'.
func parseProcStatTicks(stat []byte) (uint64, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(f), stime+1)
	}
	u, err := strconv.ParseUint(f[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseUint(f[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return u + st, nil
}
