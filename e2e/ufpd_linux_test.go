package e2e

// Helpers of the end-to-end tests that run the ufpd daemon itself, as a
// process, on real devices: pods' TAP interfaces in their own network
// namespaces, the node's vNIC, and the uplink on a veth through AF_PACKET,
// with the Linux kernel's TCP/IP stack on every end.
//
// Each test makes its own namespaces, named "ufpe-", the test binary's
// PID, a random tag and a role (ufpe-p4242-3f9a-pod-a), so that runs never
// meet; the veths are made directly inside those namespaces (nothing
// appears in the caller's), and every namespace and process is registered
// for removal when it is made, so nothing is left behind when a test
// fails. No process may be left in a namespace when it is removed, a
// last check per test verifies that the namespaces are gone, and stopping
// ufpd verifies that it removed every TAP it made. Namespaces of a test
// binary that was killed (go test -timeout) are removed by the next run.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/internal/testenv"
	"github.com/ufp-dev/ufp/vfp"
	"github.com/ufp-dev/ufp/vswitch"
)

// labCmdTimeout bounds every command a test runs (ip, ping, curl...).
const labCmdTimeout = 20 * time.Second

// labIOTimeout bounds every socket operation of a test's own clients and
// servers.
const labIOTimeout = 10 * time.Second

// requireLab skips the test unless it can build topologies: root,
// /dev/net/tun and the ip command (or fails it under CI=true).
func requireLab(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "ip")
}

// ufpdBuild is ufpd built once per test binary.
var ufpdBuild struct {
	once sync.Once
	path string
	err  error
}

// ufpdBinary returns the path of ufpd: UFP_E2E_UFPD if set, else ufpd
// built on first use (with the race detector if this test binary has it),
// which needs the go command.
func ufpdBinary(t *testing.T) string {
	return ufpdBinaryOf(t, raceEnabled())
}

// ufpdPlainBuild is ufpd built without the race detector.
var ufpdPlainBuild struct {
	once sync.Once
	path string
	err  error
}

// ufpdPlainBinary returns the path of ufpd as it ships, without the race
// detector whatever this test binary has: for the tests that load it
// (20k packets/s streams, SYN floods), which a race-detector build,
// reading about a tenth of the frames per second, cannot keep up with on
// a loaded 2-core machine.
func ufpdPlainBinary(t *testing.T) string {
	return ufpdBinaryOf(t, false)
}

func ufpdBinaryOf(t *testing.T, race bool) string {
	t.Helper()
	if p := os.Getenv("UFP_E2E_UFPD"); p != "" {
		return p
	}
	testenv.NeedTool(t, "go")
	b := &ufpdBuild
	if race != raceEnabled() {
		b = &ufpdPlainBuild
	}
	b.once.Do(func() { b.path, b.err = buildProgram("ufpd", race) })
	if b.err != nil {
		t.Fatalf("building ufpd: %v", b.err)
	}
	return b.path
}

// raceEnabled reports whether this binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// buildProgram builds the project's command name (cmd/NAME) into a fixed
// place under the temporary directory (one file, replaced atomically by
// each build, rather than a new one per run that nothing would remove),
// NAME-race with the race detector.
func buildProgram(name string, race bool) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "ufp-e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, name)
	args := []string{"build", "-o", built}
	dst := filepath.Join(dir, name)
	if race {
		dst += "-race"
		args = append(args, "-race")
	}
	args = append(args, "github.com/ufp-dev/ufp/cmd/"+name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goCmd, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := os.Rename(built, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// lab is one test's topology: the namespaces it made, and the processes
// and servers it started, each removed when the test ends. A subtest
// uses l.in(t), so that its failures and cleanups are its own.
type lab struct {
	t *testing.T
	*labState
}

// labState is what a test and its subtests share.
type labState struct {
	tag string // ufpe-pPID-XXXX: the prefix of every name the test makes

	mu    sync.Mutex
	made  map[string]uint64 // namespace name -> its inode
	tools map[string]bool   // the programs the test may run (newLab, need)
	// plainUfpd runs ufpd without the race detector (ufpdPlainBinary).
	plainUfpd bool
}

// newLab skips the test unless it can run, with every program of tools
// (what the test runs besides ip and ufpd), and registers the final check
// that everything the test made is gone. A subtest that alone runs a
// program declares it with need.
func newLab(t *testing.T, tools ...string) *lab {
	t.Helper()
	requireLab(t)
	testenv.NeedTool(t, tools...)
	sweepNamespaces(t)
	var b [2]byte
	rand.Read(b[:])
	tag := fmt.Sprintf("ufpe-p%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	l := &lab{t: t, labState: &labState{tag: tag, made: map[string]uint64{}, tools: map[string]bool{"ip": true}}}
	for _, tool := range tools {
		l.tools[tool] = true
	}
	t.Cleanup(l.checkGone) // registered first: runs last
	return l
}

// need skips l's test unless every program of tools is installed, and
// lets the lab run them.
func (l *lab) need(tools ...string) {
	l.t.Helper()
	testenv.NeedTool(l.t, tools...)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tool := range tools {
		l.tools[tool] = true
	}
}

// declared returns an error unless the test declared program (newLab or
// need) or names it by its path (ufpd): a program it runs undeclared would
// fail the test, rather than skip it, where it is not installed.
func (l *lab) declared(program string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tools[program] || strings.Contains(program, "/") {
		return nil
	}
	return fmt.Errorf("the test runs %s without declaring it: add it to newLab's tools (or to need, in the subtest that runs it)", program)
}

// sweepNamespaces removes the namespaces of test binaries that died
// without their cleanups (killed by go test's -timeout): those named
// ufpe-pPID-... whose PID is no longer running and that no process is in.
func sweepNamespaces(t *testing.T) {
	paths, _ := filepath.Glob("/var/run/netns/ufpe-p*")
	for _, path := range paths {
		name := filepath.Base(path)
		f := strings.SplitN(name, "-", 3)
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[1], "p"))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(path, &st) != nil || len(processesIn(map[uint64]string{st.Ino: name})) > 0 {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("removing namespace %s of a dead test binary (pid %d): %v: %s", name, pid, err, out)
		} else {
			t.Logf("removed namespace %s of a dead test binary (pid %d)", name, pid)
		}
	}
}

// processesIn lists the processes in the namespaces of inodes (inode ->
// name), as "PID (COMMAND) in NAME".
func processesIn(inodes map[uint64]string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			continue // the process ended meanwhile
		}
		if name, ok := inodes[st.Ino]; ok {
			pid := strings.Split(p, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			found = append(found, fmt.Sprintf("%s (%s) in %s", pid, strings.TrimSpace(string(comm)), name))
		}
	}
	return found
}

// in returns the lab as subtest t uses it.
func (l *lab) in(t *testing.T) *lab { return &lab{t: t, labState: l.labState} }

// netns makes the namespace TAG-role with its loopback up and registers
// its removal.
func (l *lab) netns(role string) string {
	l.t.Helper()
	name := l.tag + "-" + role
	l.ip("netns", "add", name)
	var st syscall.Stat_t
	if err := syscall.Stat("/var/run/netns/"+name, &st); err != nil {
		l.t.Fatalf("netns %s: %v", name, err)
	}
	l.mu.Lock()
	l.made[name] = st.Ino
	l.mu.Unlock()
	l.t.Cleanup(func() { l.delNetns(name) })
	l.ip("-n", name, "link", "set", "lo", "up")
	return name
}

// nsExists reports whether namespace name is still mounted.
func nsExists(name string) bool {
	_, err := os.Stat("/var/run/netns/" + name)
	return err == nil
}

// delNetns removes namespace name unless something removed it already.
// Everything the test started in it was stopped before (cleanups run
// last registered first): a process still in it is left behind.
func (l *lab) delNetns(name string) {
	if !nsExists(name) {
		return
	}
	l.mu.Lock()
	ino := l.made[name]
	l.mu.Unlock()
	for _, p := range processesIn(map[uint64]string{ino: name}) {
		l.t.Errorf("process %s is left behind", p)
	}
	if out, err := l.cmd("", "ip", "netns", "del", name); err != nil {
		l.t.Errorf("removing namespace %s: %v: %s", name, err, out)
	}
}

// checkGone is each test's last check: the namespaces it made are gone.
func (l *lab) checkGone() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name := range l.made {
		if nsExists(name) {
			l.t.Errorf("namespace %s is left behind", name)
		}
	}
}

// cmd runs a command, in namespace ns unless ns is "", bounded by
// labCmdTimeout, and returns its combined output.
func (l *lab) cmd(ns string, args ...string) (string, error) {
	if err := l.declared(args[0]); err != nil {
		return "", err
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), labCmdTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, args[0], args[1:]...)
	c.WaitDelay = time.Second
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timed out after %v)", err, labCmdTimeout)
	}
	return string(out), err
}

// must runs a command in namespace ns and fails the test if it fails.
func (l *lab) must(ns string, args ...string) string {
	l.t.Helper()
	out, err := l.cmd(ns, args...)
	if err != nil {
		l.t.Fatalf("%s: %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

// ip runs the ip command in the caller's namespace (use -n NS for
// another) and fails the test if it fails.
func (l *lab) ip(args ...string) string {
	l.t.Helper()
	return l.must("", append([]string{"ip"}, args...)...)
}

// veth links namespaces ns1 and ns2 with a veth pair made inside them,
// if1 in ns1 and if2 in ns2, with the given MACs ("" for the kernel's),
// both up.
func (l *lab) veth(ns1, if1, mac1, ns2, if2, mac2 string) {
	l.t.Helper()
	l.ip("link", "add", if1, "netns", ns1, "type", "veth", "peer", "name", if2, "netns", ns2)
	for _, e := range []struct{ ns, ifname, mac string }{{ns1, if1, mac1}, {ns2, if2, mac2}} {
		if e.mac != "" {
			l.ip("-n", e.ns, "link", "set", e.ifname, "address", e.mac)
		}
		l.ip("-n", e.ns, "link", "set", e.ifname, "up")
	}
}

// sysctl sets sysctls (key=value) in namespace ns.
func (l *lab) sysctl(ns string, kv ...string) {
	l.t.Helper()
	l.must(ns, append([]string{"sysctl", "-qw"}, kv...)...)
}

// linkExists reports whether interface ifname exists in namespace ns.
func (l *lab) linkExists(ns, ifname string) bool {
	_, err := l.cmd("", "ip", "-n", ns, "link", "show", "dev", ifname)
	return err == nil
}

// bg starts a long-running command in namespace ns (a server) and
// registers its end: SIGTERM to its PID, then SIGKILL if it lingers.
func (l *lab) bg(ns string, args ...string) *exec.Cmd {
	t := l.t
	t.Helper()
	if err := l.declared(args[0]); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	var out syncBuffer
	c.Stdout, c.Stderr = &out, &out
	done, err := startOrphanSafe(c, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("%s: starting %s: %v", ns, strings.Join(args, " "), err)
	}
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			c.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s in %s: %s", args[0], ns, out.String())
		}
	})
	return c
}

// startOrphanSafe starts c so that it gets signal sig if the test binary
// dies (Pdeathsig), and returns a channel closed once it has exited. The
// signal comes when the thread that forked ends, so c is started and
// waited for on one locked thread, which lives as long as c.
func startOrphanSafe(c *exec.Cmd, sig syscall.Signal) (<-chan struct{}, error) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := c.Start()
		started <- err
		if err == nil {
			c.Wait()
		}
		close(exited)
	}()
	return exited, <-started
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// ufpdConfig is ufpd's configuration file.
type ufpdConfig struct {
	Policy  *vswitch.Config `json:"policy"`
	Devices []ufpdDevice    `json:"devices"`
	Log     ufpdLog         `json:"log"`
}

type ufpdDevice struct {
	Port  string `json:"port"`
	Type  string `json:"type"`
	Name  string `json:"name,omitempty"`
	NetNS string `json:"netns,omitempty"`
}

type ufpdLog struct {
	Level string `json:"level,omitempty"`
}

// taps lists the TAP interfaces c has ufpd make: namespace and name.
func (c ufpdConfig) taps() [][2]string {
	var ts [][2]string
	for _, d := range c.Devices {
		if d.Type != "tap" {
			continue
		}
		name := d.Name
		if name == "" {
			name = "eth0"
		}
		ts = append(ts, [2]string{d.NetNS, name})
	}
	return ts
}

// ufpd is a running ufpd process.
type ufpd struct {
	l       *lab
	node    string // the namespace it runs in
	path    string // its configuration file
	cfg     ufpdConfig
	cmd     *exec.Cmd
	log     syncBuffer // its standard output and error
	exited  <-chan struct{}
	stopped bool
}

// startUfpd writes cfg and runs ufpd in namespace node with
// `ip netns exec NODE ufpd -config FILE` (ip execs ufpd, so the process
// started is ufpd itself), waits until it serves, and registers its stop.
// ufpd gets SIGTERM if the test binary dies, so that it removes its TAPs.
func (l *lab) startUfpd(node string, cfg ufpdConfig) *ufpd {
	t := l.t
	t.Helper()
	bin := ufpdBinary(t)
	u := &ufpd{l: l, node: node, path: filepath.Join(t.TempDir(), node+".json")}
	u.writeConfig(t, cfg)
	u.cmd = exec.Command("ip", "netns", "exec", node, bin, "-config", u.path)
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

// writeConfig writes cfg as u's configuration file.
func (u *ufpd) writeConfig(t *testing.T, cfg ufpdConfig) {
	t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	u.writeFile(t, b)
	u.cfg = cfg
}

// writeFile replaces u's configuration file with b, atomically.
func (u *ufpd) writeFile(t *testing.T, b []byte) {
	t.Helper()
	tmp := u.path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, u.path); err != nil {
		t.Fatal(err)
	}
}

// mark is a position in u's log, to look at what comes after it.
func (u *ufpd) mark() int { return u.log.Len() }

// findLog waits until u's log from position from on has a line holding
// every one of substrs, and returns it; it gives up when the time is up
// or ufpd has exited.
func (u *ufpd) findLog(from int, within time.Duration, substrs ...string) (string, error) {
	deadline := time.Now().Add(within)
	for {
		s := u.log.String()
		from = min(from, len(s))
		for line := range strings.SplitSeq(s[from:], "\n") {
			if !slices.ContainsFunc(substrs, func(sub string) bool { return !strings.Contains(line, sub) }) {
				return line, nil
			}
		}
		select {
		case <-u.exited:
			return "", fmt.Errorf("ufpd in %s exited (%v) before logging %q", u.node, u.cmd.ProcessState, substrs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("ufpd in %s did not log %q within %v", u.node, substrs, within)
		}
	}
}

// waitLog is findLog failing test t when nothing is found.
func (u *ufpd) waitLog(t *testing.T, from int, within time.Duration, substrs ...string) string {
	t.Helper()
	line, err := u.findLog(from, within, substrs...)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// reload writes cfg (or, if raw is not nil, those bytes) and sends ufpd
// SIGHUP; it returns the log position before the signal.
func (u *ufpd) reload(t *testing.T, cfg ufpdConfig, raw []byte) int {
	t.Helper()
	if raw != nil {
		u.writeFile(t, raw)
	} else {
		u.writeConfig(t, cfg)
	}
	m := u.mark()
	if err := syscall.Kill(u.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP to ufpd (pid %d): %v", u.cmd.Process.Pid, err)
	}
	return m
}

// stop sends ufpd SIGTERM and checks that it exits cleanly within 10
// seconds and that every TAP interface of its current configuration is
// gone (in the namespaces that still exist). It may be called again.
func (u *ufpd) stop() {
	t := u.l.t
	t.Helper()
	if u.stopped {
		return
	}
	u.stopped = true
	pid := u.cmd.Process.Pid
	select {
	case <-u.exited:
		t.Errorf("ufpd in %s (pid %d) had exited before it was stopped: %v", u.node, pid, u.cmd.ProcessState)
		return
	default:
	}
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("ufpd in %s (pid %d) did not stop within 10 s of SIGTERM: killed", u.node, pid)
		syscall.Kill(pid, syscall.SIGKILL)
		<-u.exited
		return
	}
	if !u.cmd.ProcessState.Success() {
		t.Errorf("ufpd in %s (pid %d) stopped with %v", u.node, pid, u.cmd.ProcessState)
	}
	if strings.Contains(u.log.String(), "WARNING: DATA RACE") {
		t.Errorf("ufpd in %s (pid %d, built with -race) reported a data race", u.node, pid)
	}
	for _, tap := range u.cfg.taps() {
		if nsExists(tap[0]) && u.l.linkExists(tap[0], tap[1]) {
			t.Errorf("ufpd in %s left its TAP %s in namespace %s after SIGTERM", u.node, tap[1], tap[0])
		}
	}
}

// Traffic: clients and servers in namespaces. Go sockets are opened in a
// namespace with device.InNetNS and stay there; the kernel's stack of
// that namespace carries them.

// listen opens a listener (network tcp, tcp4, tcp6) on addr in namespace
// ns and registers its close.
func (l *lab) listen(ns, network, addr string) net.Listener {
	l.t.Helper()
	var ln net.Listener
	if err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		l.t.Fatalf("%s: listen %s %s: %v", ns, network, addr, err)
	}
	l.t.Cleanup(func() { ln.Close() })
	return ln
}

// dialIn connects from namespace ns to addr (network tcp or udp).
func dialIn(ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, 3*time.Second)
		return err
	})
	return c, err
}

// sinkReport is what a TCP sink tells the client at the end: the bytes
// it received, their SHA-256 and the client address it saw.
type sinkReport struct {
	n    int64
	sum  string
	peer netip.AddrPort
}

// tcpSink serves TCP on addr in namespace ns: for each connection it
// reads to the end, then writes back "BYTES SHA256 PEER\n" and closes.
func (l *lab) tcpSink(ns, addr string) {
	l.t.Helper()
	l.tcpSinkNamed(ns, addr, "")
}

// tcpSinkNamed is tcpSink that, unless name is "", first writes "NAME\n"
// on each connection, so that a client of a load-balanced Service knows
// which backend it reached before it sends (tcpSendNamed).
func (l *lab) tcpSinkNamed(ns, addr, name string) {
	l.t.Helper()
	ln := l.listen(ns, "tcp", addr)
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	l.t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
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
			conns[c] = true
			mu.Unlock()
			go func() {
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				c.SetDeadline(time.Now().Add(time.Minute))
				if name != "" {
					if _, err := fmt.Fprintf(c, "%s\n", name); err != nil {
						return
					}
				}
				h := sha256.New()
				n, err := io.Copy(h, c)
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%d %x %s\n", n, h.Sum(nil), c.RemoteAddr())
			}()
		}
	}()
}

// tcpSend connects from namespace ns to addr, sends size pseudo-random
// bytes (or, with size 0, as many as it can until stop is closed), closes
// its side and checks the sink's report: every byte arrived, unchanged.
// It returns the report.
func tcpSend(ns, addr string, size int64, stop <-chan struct{}) (sinkReport, error) {
	c, err := dialIn(ns, "tcp", addr)
	if err != nil {
		return sinkReport{}, err
	}
	defer c.Close()
	return sendOn(c, addr, size, stop)
}

// sendOn is tcpSend on connection c to addr.
func sendOn(c net.Conn, addr string, size int64, stop <-chan struct{}) (sinkReport, error) {
	var rep sinkReport
	var seed [32]byte
	rand.Read(seed[:])
	src := mrand.NewChaCha8(seed)
	h := sha256.New()
	buf := make([]byte, 64<<10)
	var sent int64
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for size == 0 && !stopped() || size > 0 && sent < size {
		chunk := buf
		if size > 0 && size-sent < int64(len(chunk)) {
			chunk = chunk[:size-sent]
		}
		src.Read(chunk)
		h.Write(chunk)
		c.SetWriteDeadline(time.Now().Add(labIOTimeout))
		n, err := c.Write(chunk)
		sent += int64(n)
		if err != nil {
			return rep, fmt.Errorf("to %s after %d bytes: %w", addr, sent, err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return rep, err
	}
	c.SetReadDeadline(time.Now().Add(labIOTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return rep, fmt.Errorf("to %s: sent %d bytes, no report from the sink: %w", addr, sent, err)
	}
	var peer string
	if _, err := fmt.Sscan(line, &rep.n, &rep.sum, &peer); err != nil {
		return rep, fmt.Errorf("to %s: report %q: %w", addr, line, err)
	}
	if rep.peer, err = netip.ParseAddrPort(peer); err != nil {
		return rep, err
	}
	if want := hex.EncodeToString(h.Sum(nil)); rep.n != sent || rep.sum != want {
		return rep, fmt.Errorf("to %s: sent %d bytes (sha256 %.12s), the sink got %d (sha256 %.12s)", addr, sent, want, rep.n, rep.sum)
	}
	return rep, nil
}

// udpResponder answers every datagram on addr in namespace ns with
// "NAME PEER".
func (l *lab) udpResponder(ns, addr, name string) {
	l.t.Helper()
	var pc net.PacketConn
	if err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		l.t.Fatalf("%s: listen udp %s: %v", ns, addr, err)
	}
	l.t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name+" "+from.String()), from)
		}
	}()
}

// udpAsk sends a datagram from a new socket in namespace ns to dst and
// returns the answer and where it came from; it tries three times, a
// second apart (a datagram may be lost while a flow is set up).
func udpAsk(ns, dst string) (answer string, from netip.AddrPort, err error) {
	to, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		return "", from, err
	}
	var pc *net.UDPConn
	if err := device.InNetNS("/var/run/netns/"+ns, func() (err error) {
		network := "udp4"
		if to.IP.To4() == nil {
			network = "udp6"
		}
		pc, err = net.ListenUDP(network, nil)
		return err
	}); err != nil {
		return "", from, err
	}
	defer pc.Close()
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ {
		if _, err := pc.WriteToUDP([]byte("hello"), to); err != nil {
			return "", from, err
		}
		pc.SetReadDeadline(time.Now().Add(time.Second))
		n, f, err := pc.ReadFromUDPAddrPort(buf)
		if err == nil {
			return string(buf[:n]), netip.AddrPortFrom(f.Addr().Unmap(), f.Port()), nil
		}
	}
	return "", from, fmt.Errorf("udp %s from %s: no answer to 3 datagrams", dst, ns)
}

// httpBackend serves HTTP on addr in namespace ns, answering every
// request with "NAME CLIENT-ADDRESS".
func (l *lab) httpBackend(ns, addr, name string) {
	l.t.Helper()
	ln := l.listen(ns, "tcp", addr)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", name, r.RemoteAddr)
		}),
		ReadHeaderTimeout: labIOTimeout,
	}
	go srv.Serve(ln)
	l.t.Cleanup(func() { srv.Close() })
}

// ping runs `ping -c count` from namespace ns to dst (IPv4 or IPv6) and
// returns an error unless every echo is answered.
func (l *lab) ping(ns, dst string, count int) error {
	out, err := l.cmd(ns, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", dst)
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", dst, ns, err, strings.TrimSpace(out))
	}
	if !strings.Contains(out, fmt.Sprintf("%d received", count)) {
		return fmt.Errorf("ping %s from %s: lost echoes\n%s", dst, ns, strings.TrimSpace(out))
	}
	return nil
}

// waitPing pings dst from ns once a try until an echo is answered (the
// first frames on a new path may be lost while neighbours are resolved),
// for up to within.
func (l *lab) waitPing(ns, dst string, within time.Duration) error {
	end := time.Now().Add(within)
	for {
		out, err := l.cmd(ns, "ping", "-n", "-q", "-c", "1", "-W", "1", dst)
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("ping %s from %s: no echo answered within %v\n%s", dst, ns, within, strings.TrimSpace(out))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// answerPeer returns the client address in a server's answer "NAME
// PEER" (the zero AddrPort if there is none).
func answerPeer(answer string) netip.AddrPort {
	f := strings.Fields(answer)
	if len(f) != 2 {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(f[1])
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// answerName returns the server's name in its answer "NAME PEER".
func answerName(answer string) string {
	name, _, _ := strings.Cut(answer, " ")
	return name
}

// balanced calls ask, which makes one new connection or exchange to a
// load-balanced Service and returns the name of the backend that
// answered, 8 times at least and then until every backend of want has
// answered (40 times at most), and fails t unless only and all of them
// did.
func balanced(t *testing.T, want []string, ask func() (string, error)) {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < 40 && (i < 8 || len(seen) < len(want)); i++ {
		name, err := ask()
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("connections reached %v, never %s", seen, w)
		}
	}
	for name := range seen {
		if !slices.Contains(want, name) {
			t.Errorf("connections reached %v: %q is none of the backends %v", seen, name, want)
		}
	}
	t.Logf("connections reached %v", seen)
}

// hostPort joins an address and a port (brackets for IPv6).
func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// Policy builders: the HNS-level documents are built from vswitch's own
// types, written to ufpd's file as JSON.

// settings marshals a policy's settings.
func settings(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// pol is an HNS policy of type typ with settings v.
func pol(typ string, v any) hns.PolicyConfig {
	return hns.PolicyConfig{Type: typ, Settings: settings(v)}
}

// subnet is an overlay (vsid > 0) or L2Bridge subnet with its gateway.
func subnet(prefix, gw string, vsid uint32) hns.SubnetConfig {
	def := "0.0.0.0/0"
	if strings.Contains(prefix, ":") {
		def = "::/0"
	}
	s := hns.SubnetConfig{IpAddressPrefix: prefix, Routes: []hns.RouteConfig{{NextHop: gw, DestinationPrefix: def}}}
	if vsid > 0 {
		s.Policies = []hns.PolicyConfig{pol("VSID", hns.VsidSettings{IsolationId: vsid})}
	}
	return s
}

// endpoint is a local endpoint with its addresses.
func endpoint(name, network, mac string, ips []string, policies ...hns.PolicyConfig) hns.EndpointConfig {
	ep := hns.EndpointConfig{Name: name, HostComputeNetwork: network, MacAddress: mac, Policies: policies}
	for _, ip := range ips {
		ep.IpConfigurations = append(ep.IpConfigurations, hns.IpConfigConfig{IpAddress: ip})
	}
	return ep
}

// remoteSubnet is a RemoteSubnetRoute policy of VNI 4096.
func remoteSubnet(prefix, pa, drMAC string) hns.PolicyConfig {
	return pol("RemoteSubnetRoute", hns.RemoteSubnetRouteSettings{
		DestinationPrefix: prefix, IsolationId: 4096, ProviderAddress: pa, DistributedRouterMacAddress: drMAC})
}

// The single node of the flows, faults and reload tests, built as `ufpd
// demo` builds it: pods on TAPs in their namespaces, the node's vNIC (a
// TAP in the node's namespace carrying the node's addresses), and the
// uplink on the node's eth0 through AF_PACKET, a veth to an outside host
// in its own namespace (the node's default gateway).
const (
	oneHostMAC = "02:00:00:00:00:fe"
	oneDRMAC   = "02:00:00:00:01:01"
	oneExtMAC  = "02:00:00:00:00:99"
	oneNodeIP  = "192.168.50.1"
	oneNodeIP6 = "fd00:50::1"
	oneExtIP   = "192.168.50.254"
	oneExtIP6  = "fd00:50::fe"
	oneVIP     = "10.96.0.10"
	oneVIP6    = "fd00:96::10"
	oneNet     = "flannel.4096"
)

// onePod is a pod of the single node: host number n gives its addresses,
// 10.244.1.n and fd00:244:1::n, and MAC 02:00:00:00:01:n.
type onePod struct {
	name string
	n    byte
}

func (p onePod) ip4() string { return fmt.Sprintf("10.244.1.%d", p.n) }
func (p onePod) ip6() string { return fmt.Sprintf("fd00:244:1::%x", p.n) }
func (p onePod) mac() string { return fmt.Sprintf("02:00:00:00:01:%02x", p.n) }

// oneNode is a running single-node topology.
type oneNode struct {
	l         *lab
	node, ext string            // namespaces
	pods      map[string]string // pod name -> its namespace
	u         *ufpd
}

// oneNodePolicy is the node's policy: a dual-stack flannel-style Overlay
// network (VNI 4096) with the pods, each with OutBoundNAT to the node's
// address (exceptions: the cluster and service CIDRs and exceptions), and
// if backends are given a ClusterIP Service per family over them, with
// DSR: tcp 80 -> 8080 and udp 53 -> 5353.
func oneNodePolicy(pods []onePod, backends []string, exceptions ...string) *vswitch.Config {
	c := &vswitch.Config{
		Switch: vfp.SwitchConfig{Name: "e2e-one-node"},
		Uplink: &hns.UplinkConfig{
			Name: "uplink", MacAddress: oneHostMAC, HostPort: "vEthernet",
			IpAddresses:    []string{oneNodeIP + "/24", oneNodeIP6 + "/64"},
			DefaultGateway: oneExtIP,
			Neighbors:      []hns.NeighborConfig{{IpAddress: oneExtIP, MacAddress: oneExtMAC}},
		},
		Networks: []hns.NetworkConfig{{
			Name: oneNet, Type: hns.TypeOverlay,
			Ipams: []hns.IpamConfig{{Type: "Static", Subnets: []hns.SubnetConfig{
				subnet("10.244.1.0/24", "10.244.1.1", 4096),
				subnet("fd00:244:1::/64", "fd00:244:1::1", 4096),
			}}},
			Policies: []hns.PolicyConfig{
				pol("ProviderAddress", hns.ProviderAddressSettings{ProviderAddress: oneNodeIP}),
				pol("DrMacAddress", hns.DrMacAddressSettings{Address: oneDRMAC}),
			},
		}},
	}
	nat := pol("OutBoundNAT", hns.OutBoundNATSettings{
		Exceptions: append([]string{"10.244.0.0/16", "10.96.0.0/12"}, exceptions...)})
	for _, p := range pods {
		c.Endpoints = append(c.Endpoints, endpoint(p.name, oneNet, p.mac(), []string{p.ip4(), p.ip6()}, nat))
	}
	if len(backends) > 0 {
		ports := []hns.LoadBalancerPortMappingConfig{
			{Protocol: 6, InternalPort: 8080, ExternalPort: 80},
			{Protocol: 17, InternalPort: 5353, ExternalPort: 53},
		}
		c.LoadBalancers = []hns.LoadBalancerConfig{
			{Name: "web", HostComputeEndpoints: backends, FrontendVIPs: []string{oneVIP},
				Flags: hns.LBFlagDSR, PortMappings: ports},
			{Name: "web-v6", HostComputeEndpoints: backends, FrontendVIPs: []string{oneVIP6},
				Flags: hns.LBFlagDSR | hns.LBFlagIPv6, PortMappings: ports},
		}
	}
	return c
}

// config is ufpd's configuration for pods and backends: one TAP per pod
// in its namespace (made here if new), the node's vNIC and the uplink.
func (o *oneNode) config(pods []onePod, backends []string, exceptions ...string) ufpdConfig {
	o.l.t.Helper()
	cfg := ufpdConfig{Policy: oneNodePolicy(pods, backends, exceptions...), Log: ufpdLog{Level: "info"}}
	for _, p := range pods {
		ns, ok := o.pods[p.name]
		if !ok {
			ns = o.l.netns(p.name)
			o.pods[p.name] = ns
		}
		cfg.Devices = append(cfg.Devices, ufpdDevice{Port: p.name, Type: "tap", NetNS: ns})
	}
	cfg.Devices = append(cfg.Devices,
		ufpdDevice{Port: "vEthernet", Type: "tap", Name: "vEthernet", NetNS: o.node},
		ufpdDevice{Port: "uplink", Type: "afpacket", Name: "eth0", NetNS: o.node})
	return cfg
}

// newOneNode builds the single node with pods and starts its ufpd.
func (l *lab) newOneNode(pods []onePod, backends []string, exceptions ...string) *oneNode {
	l.t.Helper()
	o := &oneNode{l: l, node: l.netns("node"), ext: l.netns("ext"), pods: map[string]string{}}
	l.veth(o.node, "eth0", "", o.ext, "eth0", oneExtMAC)
	l.ip("-n", o.ext, "addr", "add", oneExtIP+"/24", "dev", "eth0")
	l.ip("-n", o.ext, "addr", "add", oneExtIP6+"/64", "dev", "eth0", "nodad")
	o.u = l.startUfpd(o.node, o.config(pods, backends, exceptions...))
	return o
}
