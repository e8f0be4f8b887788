package main

// An independent decoder cross-check: every golden output pcapng is run
// through Wireshark's tshark, which must decode each frame without errors,
// find every IPv4 header, TCP, UDP, ICMP and ICMPv6 checksum good (outer and
// inner for VXLAN), and agree with our own decoder (dataplane.Parsed) on the
// Ethernet, VLAN, ARP, IP, L4 and VXLAN headers of each frame.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
	"github.com/ufp-dev/ufp/vswitch"
)

// tsharkErrorSeverity is PI_ERROR, the value of _ws.expert.severity for
// malformed frames, bad checksums and bad lengths.
const tsharkErrorSeverity = "8388608"

// tsharkKeep are the protocols tshark dissects in the cross-check: the
// headers the switch reads and writes. Everything else is disabled, so that
// payloads (test strings sent to ports 53, 5353, ...) are shown as data
// instead of being reported as malformed DNS: they are not protocol data.
var tsharkKeep = []string{"frame", "pkt_comment", "pcapng", "eth", "ethertype", "vlan", "arp",
	"ip", "ipv6", "tcp", "udp", "icmp", "icmpv6", "vxlan", "data"}

// tshark returns the command to run tshark, or skips the test when it is
// not installed; under CI (CI=true) a missing tshark is a failure.
func tshark(t *testing.T) string {
	t.Helper()
	testenv.NeedTool(t, "tshark")
	return "tshark"
}

var tsharkProtocols = sync.OnceValues(func() ([]string, error) {
	out, err := exec.Command("tshark", "-G", "protocols").Output()
	if err != nil {
		return nil, fmt.Errorf("tshark -G protocols: %w", err)
	}
	var names []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Split(line, "\t"); len(f) >= 3 && f[2] != "" {
			names = append(names, f[2])
		}
	}
	if !slices.Contains(names, "vxlan") || !slices.Contains(names, "tcp") {
		return nil, fmt.Errorf("tshark -G protocols lists no vxlan or tcp:\n%.500s", out)
	}
	return names, nil
})

// tsharkConfigDir makes a Wireshark configuration directory that disables
// every protocol but tsharkKeep (and the _ws pseudo-protocols and IPv6
// extension headers). It also keeps a user's own preferences out of the test.
func tsharkConfigDir(t *testing.T) string {
	t.Helper()
	names, err := tsharkProtocols()
	if err != nil {
		t.Fatal(err)
	}
	var off strings.Builder
	for _, n := range names {
		if slices.Contains(tsharkKeep, n) || strings.HasPrefix(n, "_ws.") || strings.HasPrefix(n, "ipv6.") {
			continue
		}
		off.WriteString(n + "\n")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disabled_protos"), []byte(off.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tsharkPacket is one packet of tshark -T json --no-duplicate-keys: a
// protocol that occurs more than once at the top level (outer and inner eth
// and ip of a VXLAN frame) is an array, in order.
type tsharkPacket struct {
	Source struct {
		Layers map[string]any `json:"layers"`
	} `json:"_source"`
}

// runTshark decodes the pcapng at path with checksum validation on.
func runTshark(t *testing.T, bin, confDir, path string, vxlanPort uint16) []tsharkPacket {
	t.Helper()
	args := []string{"-n", "-r", path, "-T", "json", "--no-duplicate-keys",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		// Each frame on its own: the goldens mix ports and flows, so TCP
		// sequence analysis and IP reassembly would only add noise.
		"-o", "tcp.analyze_sequence_numbers:FALSE", "-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"}
	if vxlanPort != 0 && vxlanPort != dataplane.VXLANPort {
		args = append(args, "-d", fmt.Sprintf("udp.port==%d,vxlan", vxlanPort))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+confDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkts []tsharkPacket
	if err := json.Unmarshal(stdout.Bytes(), &pkts); err != nil {
		t.Fatalf("tshark -T json on %s: %v\n%.1000s", path, err, stdout.String())
	}
	return pkts
}

// tsharkCheck decodes the pcapng at path with tshark and checks every frame
// against frames (the same file read by ReadFrames). It returns one line per
// problem, each naming the frame.
func tsharkCheck(t *testing.T, bin, confDir, path string, vxlanPort uint16) (problems []string, nframes int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := capture.ReadFrames(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	pkts := runTshark(t, bin, confDir, path, vxlanPort)
	if len(pkts) != len(frames) {
		problems = append(problems, fmt.Sprintf("tshark reads %d frames, ReadFrames %d", len(pkts), len(frames)))
	}
	for i := range min(len(pkts), len(frames)) {
		c := &frameCheck{n: i + 1, layers: pkts[i].Source.Layers, data: frames[i].Data}
		c.run(frames[i], vxlanPort)
		for _, p := range c.problems {
			problems = append(problems, fmt.Sprintf("frame %d (%s %dB %s): %s", i+1, frames[i].Port,
				len(frames[i].Data), vswitch.Describe(frames[i].Data, vxlanPort), p))
		}
	}
	return problems, len(frames)
}

type frameCheck struct {
	n        int
	layers   map[string]any
	data     []byte
	problems []string
}

func (c *frameCheck) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// layer returns the i-th top-level occurrence of protocol name.
func (c *frameCheck) layer(name string, i int) map[string]any {
	switch v := c.layers[name].(type) {
	case map[string]any:
		if i == 0 {
			return v
		}
	case []any:
		if i < len(v) {
			m, _ := v[i].(map[string]any)
			return m
		}
	}
	return nil
}

// field returns the value of field name in a protocol's tree: among its
// direct fields or in the X_tree subtrees of its fields (never in the trees
// of protocols nested in it, such as the IP header quoted by an ICMP error).
func field(m map[string]any, name string) (string, bool) {
	if m == nil {
		return "", false
	}
	if v, ok := m[name]; ok {
		s, ok := v.(string)
		return s, ok
	}
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && strings.HasSuffix(k, "_tree") {
			if s, ok := field(sub, name); ok {
				return s, true
			}
		}
	}
	return "", false
}

// tsharkUint parses a tshark integer field: decimal, or hex with 0x.
func tsharkUint(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// wantUint checks that field name of layer proto equals want.
func (c *frameCheck) wantUint(proto string, m map[string]any, name string, want uint64) {
	s, ok := field(m, name)
	if !ok {
		c.errorf("%s: tshark has no %s (we decode %d)", proto, name, want)
		return
	}
	v, err := tsharkUint(s)
	if err != nil {
		c.errorf("%s: tshark's %s is %q, not a number", proto, name, s)
		return
	}
	if v != want {
		c.errorf("%s: tshark says %s = %d, we decode %d", proto, name, v, want)
	}
}

// wantAddr checks that field name (an IP address) equals want.
func (c *frameCheck) wantAddr(proto string, m map[string]any, name string, want netip.Addr) {
	s, ok := field(m, name)
	if !ok {
		c.errorf("%s: tshark has no %s (we decode %s)", proto, name, want)
		return
	}
	if a, err := netip.ParseAddr(s); err != nil || a != want {
		c.errorf("%s: tshark says %s = %s, we decode %s", proto, name, s, want)
	}
}

// wantMAC checks that field name (a MAC address) equals want.
func (c *frameCheck) wantMAC(m map[string]any, name string, want dataplane.MAC) {
	s, ok := field(m, name)
	if !ok {
		c.errorf("eth: tshark has no %s (we decode %s)", name, want)
		return
	}
	if hw, err := net.ParseMAC(s); err != nil || !bytes.Equal(hw, want[:]) {
		c.errorf("eth: tshark says %s = %s, we decode %s", name, s, want)
	}
}

// wantChecksum checks that field name (a *.checksum.status) is 1 (good),
// or one of also.
func (c *frameCheck) wantChecksum(proto string, m map[string]any, name string, also ...string) {
	st, ok := field(m, name)
	if !ok {
		c.errorf("%s: tshark has no %s", proto, name)
		return
	}
	if st != "1" && !slices.Contains(also, st) {
		msg := fmt.Sprintf("%s: %s = %s (0 bad, 1 good, 2 unverified, 3 not present; want 1)", proto, name, st)
		if sum, ok := field(m, strings.TrimSuffix(name, ".status")); ok {
			msg += ": checksum " + sum
		}
		if calc, ok := field(m, strings.TrimSuffix(name, ".status")+"_calculated"); ok {
			msg += ", tshark computes " + calc
		}
		c.problems = append(c.problems, msg)
	}
}

// walk reports, anywhere in the tree, expert infos of severity error and
// malformed-packet markers, and bad checksums (status 0) of protocols nested
// in another (the packet an ICMP error quotes; the top-level ones are
// checked by headers). A nested protocol is a key without a dot.
func (c *frameCheck) walk(v any, nested bool) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			c.walk(e, nested)
		}
	case map[string]any:
		if sev, ok := v["_ws.expert.severity"]; ok {
			sevs, msgs := strs(sev), strs(v["_ws.expert.message"])
			for i, s := range sevs {
				if s == tsharkErrorSeverity {
					msg := "?"
					if i < len(msgs) {
						msg = msgs[i]
					}
					c.errorf("tshark expert error: %s", msg)
				}
			}
		}
		for k, e := range v {
			if k == "_ws.malformed" {
				c.errorf("tshark: malformed packet: %v", e)
			}
			if s, ok := e.(string); ok && nested && strings.HasSuffix(k, ".checksum.status") && s == "0" {
				c.errorf("tshark: nested %s = 0 (bad)", k)
			}
			c.walk(e, nested || !strings.Contains(k, "."))
		}
	}
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var s []string
		for _, e := range v {
			if x, ok := e.(string); ok {
				s = append(s, x)
			}
		}
		return s
	}
	return nil
}

// headerSets splits tshark's frame.protocols ("eth:ethertype:ip:udp:vxlan:
// eth:ethertype:ip:tcp") into one set per Ethernet header, each mapping a
// protocol to the index of its top-level occurrence in the JSON layers.
// Headers after ICMP or ICMPv6 (the packet quoted by an error) are nested in
// the ICMP tree, not top-level, and are left out.
func headerSets(protocols string) []map[string]int {
	count := map[string]int{}
	var sets []map[string]int
	nested := false
	for _, p := range strings.Split(protocols, ":") {
		if p == "eth" {
			sets = append(sets, map[string]int{})
			nested = false
		}
		if len(sets) == 0 {
			continue
		}
		if nested && slices.Contains([]string{"ip", "ipv6", "tcp", "udp", "icmp", "icmpv6"}, p) {
			continue
		}
		s := sets[len(sets)-1]
		if _, ok := s[p]; !ok {
			s[p] = count[p]
		}
		count[p]++
		if p == "icmp" || p == "icmpv6" {
			nested = true
		}
	}
	return sets
}

func (c *frameCheck) run(f capture.Frame, vxlanPort uint16) {
	for _, l := range c.layers {
		c.walk(l, false)
	}
	if _, ok := c.layers["_ws.malformed"]; ok {
		c.errorf("tshark: malformed packet")
	}
	fr := c.layer("frame", 0)
	if name, _ := field(fr, "frame.interface_name"); name != f.Port {
		c.errorf("frame: tshark says interface %q, ReadFrames %q", name, f.Port)
	}
	c.wantUint("frame", fr, "frame.len", uint64(len(f.Data)))
	protocols, _ := field(fr, "frame.protocols")
	sets := headerSets(protocols)

	var pr dataplane.Parsed
	pr.VXLANPort = vxlanPort
	if r := pr.Decode(f.Data); r != dataplane.NotDropped {
		c.errorf("our decoder rejects the frame (%s); tshark decodes %s", r, protocols)
		return
	}
	ours := []*dataplane.Headers{&pr.Outer}
	if pr.Encap {
		ours = append(ours, &pr.Inner)
	}
	var vi int
	isVXLAN := false
	if len(sets) > 0 {
		vi, isVXLAN = sets[0]["vxlan"]
	}
	switch {
	case pr.Encap && !isVXLAN:
		c.errorf("we decode VXLAN vni %d, tshark does not (%s)", pr.VNI, protocols)
	case !pr.Encap && isVXLAN:
		c.errorf("tshark decodes VXLAN (%s), we do not", protocols)
	case pr.Encap:
		c.wantUint("vxlan", c.layer("vxlan", vi), "vxlan.vni", uint64(pr.VNI))
	}
	if len(sets) != len(ours) {
		c.errorf("tshark finds %d Ethernet headers (%s), we find %d", len(sets), protocols, len(ours))
		return
	}
	for i, h := range ours {
		where := "outer "
		if len(ours) == 1 {
			where = ""
		} else if i == 1 {
			where = "inner "
		}
		c.headers(where, sets[i], h)
	}
}

// headers compares one header set of ours with tshark's.
func (c *frameCheck) headers(where string, set map[string]int, h *dataplane.Headers) {
	get := func(p string) map[string]any {
		if i, ok := set[p]; ok {
			return c.layer(p, i)
		}
		return nil
	}
	eth := dataplane.Ethernet(c.data[h.Eth:])
	em := get("eth")
	c.wantMAC(em, "eth.src", eth.Src())
	c.wantMAC(em, "eth.dst", eth.Dst())
	if h.Flags&dataplane.FlagVLAN != 0 {
		vm := get("vlan")
		if vm == nil {
			c.errorf("%svlan: we decode tag %d, tshark has no vlan", where, h.VLAN&0xfff)
		} else {
			c.wantUint(where+"vlan", vm, "vlan.id", uint64(h.VLAN&0xfff))
			c.wantUint(where+"vlan", vm, "vlan.etype", uint64(h.EtherType))
		}
	} else {
		if get("vlan") != nil {
			c.errorf("%svlan: tshark decodes a VLAN tag, we do not", where)
		}
		c.wantUint(where+"eth", em, "eth.type", uint64(h.EtherType))
	}

	has := func(p string) bool { _, ok := set[p]; return ok }
	for _, p := range []string{"arp", "ip", "ipv6"} {
		want := h.EtherType == dataplane.EtherTypeARP && p == "arp" ||
			h.IPVersion == 4 && p == "ip" || h.IPVersion == 6 && p == "ipv6"
		if want != has(p) {
			c.errorf("%s%s: tshark has it: %v, we decode it: %v", where, p, has(p), want)
		}
	}
	switch {
	case h.EtherType == dataplane.EtherTypeARP:
		a := dataplane.ARP(c.data[h.L3:])
		am := get("arp")
		c.wantUint(where+"arp", am, "arp.opcode", uint64(a.Op()))
		c.wantAddr(where+"arp", am, "arp.src.proto_ipv4", a.SenderIP())
		c.wantAddr(where+"arp", am, "arp.dst.proto_ipv4", a.TargetIP())
		return
	case h.IPVersion == 4:
		im := get("ip")
		c.wantAddr(where+"ip", im, "ip.src", h.SrcAddr())
		c.wantAddr(where+"ip", im, "ip.dst", h.DstAddr())
		c.wantUint(where+"ip", im, "ip.proto", uint64(h.Proto))
		c.wantUint(where+"ip", im, "ip.ttl", uint64(h.TTL))
		c.wantChecksum(where+"ip", im, "ip.checksum.status")
	case h.IPVersion == 6:
		im := get("ipv6")
		c.wantAddr(where+"ipv6", im, "ipv6.src", h.SrcAddr())
		c.wantAddr(where+"ipv6", im, "ipv6.dst", h.DstAddr())
		c.wantUint(where+"ipv6", im, "ipv6.hlim", uint64(h.TTL))
		if h.Flags&dataplane.FlagExtHeaders == 0 {
			c.wantUint(where+"ipv6", im, "ipv6.nxt", uint64(h.Proto))
		}
	default:
		return
	}

	l4 := map[uint8]string{dataplane.ProtoTCP: "tcp", dataplane.ProtoUDP: "udp",
		dataplane.ProtoICMPv4: "icmp", dataplane.ProtoICMPv6: "icmpv6"}
	want := ""
	if h.Flags&dataplane.FlagL4 != 0 {
		want = l4[h.Proto]
	}
	for _, p := range []string{"tcp", "udp", "icmp", "icmpv6"} {
		if has(p) && p != want {
			if want == "" && h.Flags&dataplane.FlagLaterFragment == 0 &&
				(p == "icmp" && h.IPVersion == 6 || p == "icmpv6" && h.IPVersion == 4) {
				continue // ICMP of the other IP version: we carry it unparsed
			}
			c.errorf("%s%s: tshark decodes it, we decode L4 %q (protocol %d)", where, p, want, h.Proto)
		}
	}
	if want == "" {
		return
	}
	m := get(want)
	if m == nil {
		c.errorf("%s%s: we decode it, tshark does not (%s)", where, want, dataplane.ProtoName(h.Proto))
		return
	}
	// The L4 checksum of a fragment covers data tshark does not see.
	var frag []string
	if h.Flags&dataplane.FlagFragment != 0 {
		frag = []string{"2"}
	}
	switch want {
	case "tcp":
		c.wantUint(where+"tcp", m, "tcp.srcport", uint64(h.SrcPort))
		c.wantUint(where+"tcp", m, "tcp.dstport", uint64(h.DstPort))
		if s, ok := field(m, "tcp.flags"); ok {
			if v, err := tsharkUint(s); err != nil || uint8(v) != h.TCPFlags {
				c.errorf("%stcp: tshark says tcp.flags = %s, we decode 0x%02x", where, s, h.TCPFlags)
			}
		}
		c.wantChecksum(where+"tcp", m, "tcp.checksum.status", frag...)
	case "udp":
		c.wantUint(where+"udp", m, "udp.srcport", uint64(h.SrcPort))
		c.wantUint(where+"udp", m, "udp.dstport", uint64(h.DstPort))
		also := frag
		if h.IPVersion == 4 && binary.BigEndian.Uint16(c.data[h.L4+6:]) == 0 {
			also = append(also, "2", "3") // no checksum: allowed over IPv4
		}
		c.wantChecksum(where+"udp", m, "udp.checksum.status", also...)
	case "icmp", "icmpv6":
		c.wantUint(where+want, m, want+".type", uint64(h.DstPort>>8))
		c.wantUint(where+want, m, want+".code", uint64(h.DstPort&0xff))
		if t := uint8(h.DstPort >> 8); want == "icmp" && (t == dataplane.ICMPv4EchoRequest || t == dataplane.ICMPv4EchoReply) {
			c.wantUint(where+want, m, "icmp.ident", uint64(h.SrcPort))
		} else if want == "icmpv6" && (t == dataplane.ICMPv6EchoRequest || t == dataplane.ICMPv6EchoReply) {
			c.wantUint(where+want, m, "icmpv6.echo.identifier", uint64(h.SrcPort))
		}
		c.wantChecksum(where+want, m, want+".checksum.status", frag...)
	}
}

// goldenOutputs lists every golden output pcapng with its scenario name and
// the policy's VXLAN port.
func goldenOutputs(t *testing.T) (names, paths []string, ports []uint16) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "scenarios", "*", "want.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no testdata/scenarios/*/want.pcapng")
	}
	dirs = append(dirs, filepath.Join("quickstart", "want.pcapng"))
	for _, p := range dirs {
		dir := filepath.Dir(p)
		b, err := os.ReadFile(filepath.Join(dir, "policy.json"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := vswitch.ParseConfig(b)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		names = append(names, filepath.Base(dir))
		paths = append(paths, p)
		ports = append(ports, vxlanPort(cfg))
	}
	return names, paths, ports
}

// TestTsharkGoldenOutputs cross-checks every golden output with tshark.
func TestTsharkGoldenOutputs(t *testing.T) {
	bin := tshark(t)
	conf := tsharkConfigDir(t)
	out, _ := exec.Command(bin, "--version").Output()
	t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
	names, paths, ports := goldenOutputs(t)
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			problems, n := tsharkCheck(t, bin, conf, paths[i], ports[i])
			for _, p := range problems {
				t.Errorf("%s: %s", paths[i], p)
			}
			port := ports[i]
			if port == 0 {
				port = dataplane.VXLANPort
			}
			t.Logf("%s: %d frames verified by tshark (vxlan port %d)", paths[i], n, port)
		})
	}
}

// TestTsharkCatchesCorruption makes sure the cross-check is not vacuous: a
// bad checksum in any header it checks, or a disagreement about VXLAN, is
// reported. It also checks a non-default VXLAN port (tshark's -d).
func TestTsharkCatchesCorruption(t *testing.T) {
	bin := tshark(t)
	conf := tsharkConfigDir(t)
	load := func(name string) []capture.Frame {
		b, err := os.ReadFile(filepath.Join(scenarioDir(name), "want.pcapng"))
		if err != nil {
			t.Fatal(err)
		}
		fs, err := capture.ReadFrames(b)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	all := append(load("pod-to-pod"), load("overlay-push-pop")...)
	// pick returns a copy of the first frame for which ok holds.
	pick := func(ok func(pr *dataplane.Parsed) bool) (capture.Frame, *dataplane.Parsed) {
		for _, f := range all {
			pr := &dataplane.Parsed{}
			if pr.Decode(f.Data) == dataplane.NotDropped && ok(pr) {
				f.Data = slices.Clone(f.Data)
				return f, pr
			}
		}
		t.Fatal("no golden frame fits")
		return capture.Frame{}, nil
	}
	plain := func(proto uint8, ipv uint8) func(pr *dataplane.Parsed) bool {
		return func(pr *dataplane.Parsed) bool {
			return !pr.Encap && pr.Outer.IPVersion == ipv && pr.Outer.Proto == proto && pr.Outer.Flags&dataplane.FlagL4 != 0
		}
	}
	encap := func(proto uint8) func(pr *dataplane.Parsed) bool {
		return func(pr *dataplane.Parsed) bool {
			return pr.Encap && pr.Inner.Proto == proto && pr.Inner.Flags&dataplane.FlagL4 != 0
		}
	}
	type tc struct {
		name  string
		frame capture.Frame
		port  uint16
		want  string // a substring of some problem; "" for none
	}
	var cases []tc
	flip := func(name string, ok func(*dataplane.Parsed) bool, off func(*dataplane.Parsed) int32, want string) {
		f, pr := pick(ok)
		f.Data[off(pr)] ^= 0x5a
		cases = append(cases, tc{name, f, 0, want})
	}
	flip("ipv4 header checksum", plain(dataplane.ProtoTCP, 4), func(pr *dataplane.Parsed) int32 { return pr.Outer.L3 + 10 }, "ip.checksum.status = 0")
	flip("tcp checksum", plain(dataplane.ProtoTCP, 4), func(pr *dataplane.Parsed) int32 { return pr.Outer.L4 + 16 }, "tcp.checksum.status = 0")
	flip("udp checksum over ipv6", plain(dataplane.ProtoUDP, 6), func(pr *dataplane.Parsed) int32 { return pr.Outer.L4 + 6 }, "udp.checksum.status = 0")
	flip("icmp checksum", plain(dataplane.ProtoICMPv4, 4), func(pr *dataplane.Parsed) int32 { return pr.Outer.L4 + 2 }, "icmp.checksum.status = 0")
	flip("icmpv6 checksum", plain(dataplane.ProtoICMPv6, 6), func(pr *dataplane.Parsed) int32 { return pr.Outer.L4 + 2 }, "icmpv6.checksum.status = 0")
	flip("outer ipv4 header checksum", encap(dataplane.ProtoTCP), func(pr *dataplane.Parsed) int32 { return pr.Outer.L3 + 10 }, "outer ip: ip.checksum.status = 0")
	flip("inner ipv4 header checksum", encap(dataplane.ProtoTCP), func(pr *dataplane.Parsed) int32 { return pr.Inner.L3 + 10 }, "inner ip: ip.checksum.status = 0")
	flip("inner tcp checksum", encap(dataplane.ProtoTCP), func(pr *dataplane.Parsed) int32 { return pr.Inner.L4 + 16 }, "inner tcp: tcp.checksum.status = 0")
	flip("inner icmp checksum", encap(dataplane.ProtoICMPv4), func(pr *dataplane.Parsed) int32 { return pr.Inner.L4 + 2 }, "inner icmp: icmp.checksum.status = 0")

	// Our decoder and tshark disagree on the VXLAN port: we see plain UDP.
	f, _ := pick(encap(dataplane.ProtoTCP))
	cases = append(cases, tc{"vxlan port disagreement", f, 8472, "tshark decodes VXLAN"})
	// Move a VXLAN frame to port 8472: with -d, tshark agrees with us.
	f, pr := pick(encap(dataplane.ProtoUDP))
	if binary.BigEndian.Uint16(f.Data[pr.Outer.L4+6:]) != 0 {
		binary.BigEndian.PutUint16(f.Data[pr.Outer.L4+6:], 0) // no outer UDP checksum to fix
	}
	binary.BigEndian.PutUint16(f.Data[pr.Outer.L4+2:], 8472)
	cases = append(cases, tc{"vxlan on port 8472", f, 8472, ""})

	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "-"), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "frame.pcapng")
			var buf bytes.Buffer
			if err := capture.WriteFrames(&buf, "ufp-replay", nil, []capture.Frame{c.frame}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			problems, _ := tsharkCheck(t, bin, conf, path, c.port)
			joined := strings.Join(problems, "\n")
			switch {
			case c.want == "":
				if len(problems) > 0 {
					t.Errorf("want no problems, got:\n%s", joined)
				}
			case !strings.Contains(joined, c.want):
				t.Errorf("want a problem containing %q, got:\n%s", c.want, joined)
			default:
				t.Logf("caught: %s", joined)
			}
		})
	}
}
