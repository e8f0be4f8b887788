package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Open vSwitch under test: the userspace (netdev) datapath of Debian's
// openvswitch-switch, which needs no kernel module. Each node's switch is
// an ovsdb-server and an ovs-vswitchd of the harness's own, started as
// child processes in a private run directory (its own conf.db, sockets,
// pidfiles and logs; OVS_RUNDIR and the other OVS_* directories point
// there, so nothing touches /var/run/openvswitch or a system Open
// vSwitch). ovs-vswitchd runs inside the switch's (or node's) namespace,
// so its bridges' internal ports and the ports it makes are there.

// ovsVersion is the version of the installed ovs-vswitchd. The zero
// value is unknown.
type ovsVersion struct{ major, minor, patch int }

// known reports whether v was read.
func (v ovsVersion) known() bool { return v.major > 0 }

// atLeast reports whether v is major.minor or later.
func (v ovsVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

func (v ovsVersion) String() string {
	return fmt.Sprintf("Open vSwitch %d.%d.%d", v.major, v.minor, v.patch)
}

var ovsVersionRE = regexp.MustCompile(`\(Open vSwitch\) (\d+)\.(\d+)\.(\d+)`)

// parseOVSVersion parses the first line of `ovs-vswitchd --version`
// ("ovs-vswitchd (Open vSwitch) 3.1.0").
func parseOVSVersion(out []byte) (ovsVersion, error) {
	m := ovsVersionRE.FindSubmatch(out)
	if m == nil {
		return ovsVersion{}, fmt.Errorf("ovs-vswitchd --version: no version in %q", bytes.TrimSpace(out))
	}
	var v ovsVersion
	v.major, _ = strconv.Atoi(string(m[1])) // \d+
	v.minor, _ = strconv.Atoi(string(m[2]))
	v.patch, _ = strconv.Atoi(string(m[3]))
	return v, nil
}

// readOVSVersion returns the installed ovs-vswitchd's version.
func readOVSVersion(ctx context.Context, r *runner) (ovsVersion, error) {
	out, err := r.output(ctx, ovsTimeout, "ovs-vswitchd", "--version")
	if err != nil {
		return ovsVersion{}, err
	}
	return parseOVSVersion(out)
}

// parseOVSList parses a set or list column as ovs-vsctl get prints it:
// `[afxdp, "a b", tap]`, or a single value without brackets.
func parseOVSList(out []byte) []string {
	s := strings.TrimSpace(string(out))
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	var vals []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		if v != "" {
			vals = append(vals, v)
		}
	}
	return vals
}

// ovsSchema returns the path of the installed vswitch.ovsschema, which
// conf.db is made from.
func ovsSchema() (string, error) {
	dir := os.Getenv("OVS_PKGDATADIR")
	if dir == "" {
		dir = "/usr/share/openvswitch"
	}
	p := filepath.Join(dir, "vswitch.ovsschema")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("Open vSwitch's database schema: %w (package openvswitch-common)", err)
	}
	return p, nil
}

// pmdMask returns an Open vSwitch CPU mask (hexadecimal) with only the
// last of ncpu CPUs: the core the polling (PMD) threads of AF_XDP ports
// get, leaving the others to the pods.
func pmdMask(ncpu int) string {
	if ncpu < 1 {
		ncpu = 1
	}
	bit := ncpu - 1
	return "0x" + strconv.Itoa(1<<(bit%4)) + strings.Repeat("0", bit/4)
}

// ovsVariant is how an Open vSwitch switch under test is set up.
type ovsVariant struct {
	tso   bool // userspace TSO (other_config:userspace-tso-enable)
	afxdp bool // pods on veths through AF_XDP ports, rather than on TAP ports
}

// variantOf returns the variant of the switch named name.
func variantOf(name string) ovsVariant {
	return ovsVariant{tso: name == swOVSTSO, afxdp: name == swOVSAFXDP}
}

// otherConfig returns the Open_vSwitch table's other_config settings of
// the variant, on a machine with ncpu CPUs. They are set before
// ovs-vswitchd starts (userspace TSO is read only then).
func (v ovsVariant) otherConfig(ncpu int) []string {
	var kv []string
	if v.tso {
		kv = append(kv, "other_config:userspace-tso-enable=true")
	}
	if v.afxdp {
		kv = append(kv, "other_config:pmd-cpu-mask="+pmdMask(ncpu))
	}
	return kv
}

// portType returns the Interface type of the pods' ports.
func (v ovsVariant) portType() string {
	if v.afxdp {
		return "afxdp"
	}
	return "tap"
}

// ovsBridgeArgs returns the ovs-vsctl arguments that add bridge br with
// the userspace datapath, and extra settings of it.
func ovsBridgeArgs(br string, extra ...string) []string {
	return append([]string{"add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"}, extra...)
}

// ovsPortArgs returns the ovs-vsctl arguments that add port port of type
// typ to bridge br.
func ovsPortArgs(br, port, typ string) []string {
	return []string{"add-port", br, port, "--", "set", "interface", port, "type=" + typ}
}

// ovsUnderlayArgs returns the ovs-vsctl arguments that make node n's
// br-phy: the bridge whose internal port carries the node's underlay
// address (userspace tunnelling routes and resolves the VXLAN outer
// header through it), with MAC n.mac() and MTU underlayMTU, and the
// node's underlay veth as its port (an AF_XDP port with afxdp, else a
// plain one, which ovs-vswitchd reads through a packet socket).
func ovsUnderlayArgs(n overlayNode, afxdp bool) []string {
	args := ovsBridgeArgs("br-phy", "other_config:hwaddr="+n.mac(),
		"--", "set", "interface", "br-phy", "mtu_request="+strconv.Itoa(underlayMTU),
		"--", "add-port", "br-phy", ovlNodeIfName)
	if afxdp {
		args = append(args, "--", "set", "interface", ovlNodeIfName, "type=afxdp")
	}
	return args
}

// ovsVXLANArgs returns the ovs-vsctl arguments that make node n's br-int,
// the pods' bridge, with a VXLAN port to the other node (VNI 4096, UDP
// 4789).
func ovsVXLANArgs(n overlayNode) []string {
	return ovsBridgeArgs("br-int",
		"--", "add-port", "br-int", "vxlan0",
		"--", "set", "interface", "vxlan0", "type=vxlan",
		"options:remote_ip="+n.peer().ip(), "options:key="+strconv.Itoa(vxlanVNI), "options:dst_port="+strconv.Itoa(vxlanPort))
}

// ovsInstance is one Open vSwitch: an ovsdb-server and an ovs-vswitchd
// in the private run directory dir.
type ovsInstance struct {
	name     string // for messages: "ovs-tap", "ovs-tap node 1"
	dir      string
	env      []string // OVS_RUNDIR and the others, to dir
	db       *child   // ovsdb-server
	vswitchd *child
}

func (o *ovsInstance) sock() string { return filepath.Join(o.dir, "db.sock") }
func (o *ovsInstance) ctl() string  { return filepath.Join(o.dir, "ovs-vswitchd.ctl") }

// ovsEnv returns the environment that points Open vSwitch's directories
// at dir.
func ovsEnv(dir string) []string {
	var env []string
	for _, v := range []string{"OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"} {
		env = append(env, v+"="+dir)
	}
	return env
}

// startOVS starts an Open vSwitch named name in the new private run
// directory dir: conf.db made with ovsdb-tool, ovsdb-server on its own
// socket, other_config set, then ovs-vswitchd inside namespace netns. The
// teardown stops both by PID (ovs-vswitchd first) and removes dir.
func startOVS(ctx context.Context, l *lab, name, dir, netns string, otherConfig []string) (*ovsInstance, error) {
	schema, err := ovsSchema()
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s run directory: %w", name, err)
	}
	l.td.push("remove "+dir, func() error { return os.RemoveAll(dir) })
	o := &ovsInstance{name: name, dir: dir, env: ovsEnv(dir)}
	r := l.r
	db := filepath.Join(dir, "conf.db")
	if _, err := r.outputEnv(ctx, ovsTimeout, o.env, "ovsdb-tool", "create", db, schema); err != nil {
		return nil, err
	}
	if o.db, err = o.startDaemon(l, "ovsdb-server", []string{"ovsdb-server", db,
		"--remote=punix:" + o.sock(),
		"--pidfile=" + filepath.Join(dir, "ovsdb-server.pid"),
		"--unixctl=" + filepath.Join(dir, "ovsdb-server.ctl"),
		"--log-file=" + filepath.Join(dir, "ovsdb-server.log"),
		"-vconsole:off"}); err != nil {
		return nil, err
	}
	// The database is ready once ovs-vsctl can initialise it.
	if err := o.retry(ctx, func() error {
		_, err := o.vsctlArgs(ctx, r, 2, "--no-wait", "init")
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: ovsdb-server does not answer: %w", name, err)
	}
	if len(otherConfig) > 0 {
		args := append([]string{"--no-wait", "set", "Open_vSwitch", "."}, otherConfig...)
		if _, err := o.vsctl(ctx, r, args...); err != nil {
			return nil, err
		}
	}
	if o.vswitchd, err = o.startDaemon(l, "ovs-vswitchd", inNetns(netns, "ovs-vswitchd", "unix:"+o.sock(),
		"--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--unixctl="+o.ctl(),
		"--log-file="+filepath.Join(dir, "ovs-vswitchd.log"),
		"-vconsole:off")); err != nil {
		return nil, err
	}
	// ovs-vswitchd is up once it has published the interface types it
	// supports.
	if err := o.retry(ctx, func() error {
		types, err := o.ifaceTypes(ctx, r)
		if err == nil && len(types) == 0 {
			err = errors.New("no iface_types yet")
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: ovs-vswitchd is not up: %w", name, err)
	}
	return o, nil
}

// startDaemon starts one of the instance's daemons (argv, logging to
// PROG.out in the run directory besides its own log file) and registers
// its stop. ovs-vswitchd is resumed first in case the harness paused it.
func (o *ovsInstance) startDaemon(l *lab, prog string, argv []string) (*child, error) {
	out, err := os.Create(filepath.Join(o.dir, prog+".out"))
	if err != nil {
		return nil, fmt.Errorf("%s %s output: %w", o.name, prog, err)
	}
	l.td.push("close "+out.Name(), out.Close)
	c, err := l.r.startEnv(o.env, argv, out, out)
	if err != nil {
		return nil, err
	}
	l.td.push(fmt.Sprintf("stop %s's %s (pid %d)", o.name, prog, c.pid()), func() error {
		// Killed by SIGTERM is how both exit; only a SIGKILL is news.
		return errors.Join(c.resume(), c.stop())
	})
	return c, nil
}

// retry runs try until it succeeds, the daemons exit, or readyLimit
// passes.
func (o *ovsInstance) retry(ctx context.Context, try func() error) error {
	deadline := time.Now().Add(readyLimit)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if e := o.alive(); e != nil {
			return e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// alive reports an error, with the end of the daemon's log, once either
// daemon has exited.
func (o *ovsInstance) alive() error {
	for _, d := range []struct {
		prog string
		c    *child
	}{{"ovsdb-server", o.db}, {"ovs-vswitchd", o.vswitchd}} {
		if d.c != nil && d.c.exited() {
			return fmt.Errorf("%s's %s exited (%v); the end of its log:\n%s",
				o.name, d.prog, d.c.err, fileTail(filepath.Join(o.dir, d.prog+".log"), 10))
		}
	}
	return nil
}

// vsctl runs ovs-vsctl on the instance's database with args.
func (o *ovsInstance) vsctl(ctx context.Context, r *runner, args ...string) ([]byte, error) {
	return o.vsctlArgs(ctx, r, 15, args...)
}

// vsctlArgs runs ovs-vsctl with its own timeout of seconds.
func (o *ovsInstance) vsctlArgs(ctx context.Context, r *runner, seconds int, args ...string) ([]byte, error) {
	argv := append([]string{"ovs-vsctl", "--db=unix:" + o.sock(), "--timeout=" + strconv.Itoa(seconds)}, args...)
	return r.outputEnv(ctx, ovsTimeout, o.env, argv...)
}

// appctl runs ovs-appctl on the instance's ovs-vswitchd with args.
func (o *ovsInstance) appctl(ctx context.Context, r *runner, args ...string) ([]byte, error) {
	argv := append([]string{"ovs-appctl", "-t", o.ctl(), "--timeout=15"}, args...)
	return r.outputEnv(ctx, ovsTimeout, o.env, argv...)
}

// ifaceTypes returns the interface types ovs-vswitchd supports.
func (o *ovsInstance) ifaceTypes(ctx context.Context, r *runner) ([]string, error) {
	out, err := o.vsctlArgs(ctx, r, 2, "get", "Open_vSwitch", ".", "iface_types")
	if err != nil {
		return nil, err
	}
	return parseOVSList(out), nil
}

var ovsLookupsRE = regexp.MustCompile(`lookups: hit:(\d+) missed:(\d+) lost:(\d+)`)

// parseDatapathLookups returns the packets the datapaths in the output of
// `ovs-appctl dpctl/show` have looked up (hit+missed, summed over the
// datapaths).
func parseDatapathLookups(out []byte) (uint64, error) {
	ms := ovsLookupsRE.FindAllSubmatch(out, -1)
	if ms == nil {
		return 0, fmt.Errorf("dpctl/show: no lookups line in %q", bytes.TrimSpace(out))
	}
	var n uint64
	for _, m := range ms {
		hit, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("dpctl/show: hit: %w", err)
		}
		missed, err := strconv.ParseUint(string(m[2]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("dpctl/show: missed: %w", err)
		}
		n += hit + missed
	}
	return n, nil
}

// lookups returns the packets ovs-vswitchd's datapath has looked up.
func (o *ovsInstance) lookups(ctx context.Context, r *runner) (uint64, error) {
	out, err := o.appctl(ctx, r, "dpctl/show")
	if err != nil {
		return 0, err
	}
	n, err := parseDatapathLookups(out)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", o.name, err)
	}
	return n, nil
}

// ovsDatapath returns a testbed.datapath that sums the lookups of the
// instances.
func ovsDatapath(r *runner, instances ...*ovsInstance) func(ctx context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		var sum uint64
		for _, o := range instances {
			n, err := o.lookups(ctx, r)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	}
}

// checkVariant returns a skipError when this Open vSwitch cannot run
// variant v (a build without AF_XDP).
func (o *ovsInstance) checkVariant(ctx context.Context, r *runner, v ovsVariant) error {
	if !v.afxdp {
		return nil
	}
	types, err := o.ifaceTypes(ctx, r)
	if err != nil {
		return err
	}
	if !slices.Contains(types, "afxdp") {
		return skip("this Open vSwitch build has no AF_XDP ports (its interface types: %s)", strings.Join(types, ", "))
	}
	return nil
}

// attachOVSPod gives pod namespace pod an eth0 with address cidr and MAC
// mac on port port of bridge br, in namespace sw where ovs-vswitchd runs:
// a TAP that Open vSwitch makes and the harness moves into the pod
// (ovs-vswitchd keeps its file descriptor, which works in any namespace),
// or with afxdp a veth whose switch end is an AF_XDP port. AF_XDP carries
// no offload metadata, so the pod's checksum offload is turned off.
func attachOVSPod(ctx context.Context, l *lab, o *ovsInstance, v ovsVariant, sw, br, port, pod, cidr, mac string) error {
	r := l.r
	if v.afxdp {
		if err := addPodVeth(ctx, r, sw, pod, port, cidr, mac); err != nil {
			return err
		}
		if _, err := r.output(ctx, ipTimeout, inNetns(pod, "ethtool", "-K", podIfName, "tx", "off")...); err != nil {
			return err
		}
		_, err := o.vsctl(ctx, r, ovsPortArgs(br, port, v.portType())...)
		return err
	}
	if _, err := o.vsctl(ctx, r, ovsPortArgs(br, port, v.portType())...); err != nil {
		return err
	}
	return runIP(ctx, r,
		[]string{"-n", sw, "link", "set", port, "netns", pod},
		[]string{"-n", pod, "link", "set", port, "name", podIfName, "address", mac},
		[]string{"-n", pod, "addr", "add", cidr, "dev", podIfName},
		[]string{"-n", pod, "link", "set", podIfName, "up"},
	)
}

// setupOVSPair builds Open vSwitch's testbed name (ovs-tap, ovs-tso or
// ovs-afxdp) on the pair topology: a switch namespace where ovs-vswitchd
// runs with one userspace bridge, br0, and the two pods on its ports.
func setupOVSPair(ctx context.Context, l *lab, name string) (*testbed, error) {
	v := variantOf(name)
	b := &testbed{name: name, podA: nsName(l.id, name+"-a"), podB: nsName(l.id, name+"-b"), target: podBIP}
	sw := nsName(l.id, name+"-sw")
	for _, ns := range []string{sw, b.podA, b.podB} {
		if err := addNetns(ctx, l.r, l.td, ns); err != nil {
			return nil, err
		}
	}
	o, err := startOVS(ctx, l, name, filepath.Join(l.work, name), sw, v.otherConfig(runtime.NumCPU()))
	if err != nil {
		return nil, err
	}
	if err := o.checkVariant(ctx, l.r, v); err != nil {
		return nil, err
	}
	if _, err := o.vsctl(ctx, l.r, ovsBridgeArgs("br0")...); err != nil {
		return nil, err
	}
	pods := []struct{ ns, port, ip, mac string }{
		{b.podA, "pa", podAIP, podAMAC},
		{b.podB, "pb", podBIP, podBMAC},
	}
	for _, p := range pods {
		if err := attachOVSPod(ctx, l, o, v, sw, "br0", p.port, p.ns, p.ip+podPrefix, p.mac); err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.ns, err)
		}
	}
	b.switchPIDs, b.alive, b.datapath = []int{o.vswitchd.pid()}, o.alive, ovsDatapath(l.r, o)
	if v.afxdp {
		b.idle, b.wake = o.vswitchd.pause, o.vswitchd.resume
	}
	return b, nil
}

// setupOVSOverlay builds Open vSwitch's testbed name on the overlay
// topology: in each node an ovs-vswitchd with br-phy (the underlay:
// the node's veth and its address, ovsUnderlayArgs) and br-int (the
// pod's port and a VXLAN port to the other node, ovsVXLANArgs), with the
// other node's br-phy MAC in its tunnel neighbour table. The pods share
// one L2 segment across the nodes, as on the kernel's overlay.
func setupOVSOverlay(ctx context.Context, l *lab, name string) (*testbed, error) {
	v := variantOf(name)
	if v.tso && !l.ovs.atLeast(3, 3) {
		return nil, skip("%s's userspace datapath drops the TSO packets it has to tunnel (\"Tunneling packets with HW offload flags is not supported\"), so TCP does not pass its VXLAN port with userspace TSO on; tunnel TSO came with Open vSwitch 3.3", l.ovs)
	}
	ns, err := makeOverlayNS(ctx, l, "ovl-"+name, overlayNode.vethMAC)
	if err != nil {
		return nil, err
	}
	b := ns.testbed(name)
	var nodes []*ovsInstance
	for _, n := range []overlayNode{1, 2} {
		node := ns.node[n]
		o, err := startOVS(ctx, l, fmt.Sprintf("%s node %d", name, n),
			filepath.Join(l.work, fmt.Sprintf("ovl-%s-n%d", name, n)), node, v.otherConfig(runtime.NumCPU()))
		if err != nil {
			return nil, err
		}
		if err := o.checkVariant(ctx, l.r, v); err != nil {
			return nil, err
		}
		if _, err := o.vsctl(ctx, l.r, ovsUnderlayArgs(n, v.afxdp)...); err != nil {
			return nil, err
		}
		if err := runIP(ctx, l.r,
			[]string{"-n", node, "addr", "add", n.ip() + underlayLen, "dev", "br-phy"},
			[]string{"-n", node, "link", "set", "br-phy", "up"},
		); err != nil {
			return nil, err
		}
		if _, err := o.vsctl(ctx, l.r, ovsVXLANArgs(n)...); err != nil {
			return nil, err
		}
		_, ip, mac := n.pod()
		if err := attachOVSPod(ctx, l, o, v, node, "br-int", "pod", ns.pod[n], ip+ovlPodL2Len, mac); err != nil {
			return nil, fmt.Errorf("pod %s: %w", ns.pod[n], err)
		}
		if _, err := o.appctl(ctx, l.r, "tnl/arp/set", "br-phy", n.peer().ip(), n.peer().mac()); err != nil {
			return nil, err
		}
		nodes = append(nodes, o)
		b.switchPIDs = append(b.switchPIDs, o.vswitchd.pid())
	}
	b.alive = func() error { return errors.Join(nodes[0].alive(), nodes[1].alive()) }
	b.datapath = ovsDatapath(l.r, nodes...)
	if v.afxdp {
		b.idle = func() error { return errors.Join(nodes[0].vswitchd.pause(), nodes[1].vswitchd.pause()) }
		b.wake = func() error { return errors.Join(nodes[0].vswitchd.resume(), nodes[1].vswitchd.resume()) }
	}
	return b, nil
}
