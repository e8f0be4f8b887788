package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/ufp-dev/ufp/capture"
)

// ufp runs the command with args and returns its exit code and output.
func ufp(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// copyScenario copies scenario directory src into a new temporary
// directory and returns it.
func copyScenario(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		writeFile(t, filepath.Join(dst, e.Name()), readFile(t, filepath.Join(src, e.Name())))
	}
	return dst
}

var (
	qsPolicy = filepath.Join("quickstart", "policy.json")
	qsIn     = filepath.Join("quickstart", "in.pcapng")
)

func TestCLIQuickstart(t *testing.T) {
	code, out, errs := ufp(t)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if want := string(readFile(t, filepath.Join("quickstart", "want-trace.txt"))); out != want {
		t.Errorf("quickstart trace differs from quickstart/want-trace.txt:\n%s", DiffLines(want, out))
	}
	if !strings.Contains(out, "summary: 7 in") {
		t.Errorf("no summary in the trace:\n%s", out)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, filepath.Join(dir, "p.json"), readFile(t, qsPolicy))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"unknown flag", []string{"-polcy", "x.json"}, 2, "flag provided but not defined: -polcy"},
		{"extra arguments", []string{"-policy", pol, "-in", qsIn, "extra"}, 2, `unexpected arguments ["extra"]`},
		{"policy without in", []string{"-policy", pol}, 2, "-policy and -in go together"},
		{"in without policy", []string{"-in", qsIn}, 2, "-policy and -in go together"},
		{"then without policy", []string{"-then", "2=" + pol}, 2, "-then goes with -policy and -in"},
		{"then with check", []string{"-check", "quickstart", "-then", "2=" + pol}, 2, "-then goes with -policy and -in"},
		{"update without check", []string{"-update"}, 2, "-update goes with -check"},
		{"help", []string{"-h"}, 0, "usage: ufp-replay"},
		{"missing policy file", []string{"-policy", filepath.Join(dir, "none.json"), "-in", qsIn}, 1, "none.json: no such file"},
		{"missing input file", []string{"-policy", pol, "-in", filepath.Join(dir, "none.pcapng")}, 1, "none.pcapng: no such file"},
		{"then without =", []string{"-policy", pol, "-in", qsIn, "-then", "3"}, 1, `-then "3": want N=FILE with N a packet number from 1`},
		{"then with packet 0", []string{"-policy", pol, "-in", qsIn, "-then", "0=" + pol}, 1, `-then "0=`},
		{"then with a bad number", []string{"-policy", pol, "-in", qsIn, "-then", "two=" + pol}, 1, "want N=FILE"},
		{"then with a missing file", []string{"-policy", pol, "-in", qsIn, "-then", "2=" + filepath.Join(dir, "none.json")}, 1, "none.json: no such file"},
		{"check of a missing directory", []string{"-check", filepath.Join(dir, "nowhere")}, 1, "nowhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := ufp(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, out, errs)
			}
			if !strings.Contains(errs, tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", errs, tt.wantErr)
			}
			if tt.wantCode != 0 && out != "" {
				t.Errorf("stdout %q on failure", out)
			}
		})
	}
}

func TestCLINotAPcapng(t *testing.T) {
	dir := t.TempDir()
	for _, in := range []struct{ name, path string }{
		{"policy as input", qsPolicy},
		{"empty input", writeFile(t, filepath.Join(dir, "empty.pcapng"), nil)},
		{"classic pcap", writeFile(t, filepath.Join(dir, "classic.pcap"), classicPcap(t))},
	} {
		t.Run(in.name, func(t *testing.T) {
			code, out, errs := ufp(t, "-policy", qsPolicy, "-in", in.path)
			if code != 1 || !strings.Contains(errs, "input: not a pcapng file") {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 1 and \"not a pcapng\"", code, errs, out)
			}
		})
	}
}

func classicPcap(t *testing.T) []byte {
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestCLIBadPolicy(t *testing.T) {
	dir := t.TempDir()
	raw := strings.Replace(string(readFile(t, qsPolicy)), `"priority": 100`, `"priority": "high"`, 1)
	pol := writeFile(t, filepath.Join(dir, "policy.json"), []byte(raw))
	code, out, errs := ufp(t, "-policy", pol, "-in", qsIn)
	if code != 1 || !strings.Contains(errs, pol+": ports[1].layers[0].groups[0].rules[0].priority: want a number") {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errs, out)
	}
	// The same policy in a scenario directory.
	sc := copyScenario(t, "quickstart")
	writeFile(t, filepath.Join(sc, "policy.json"), []byte(raw))
	code, _, errs = ufp(t, "-check", sc)
	if code != 1 || !strings.Contains(errs, "policy.json: ports[1].layers[0].groups[0].rules[0].priority") {
		t.Errorf("-check: exit %d, stderr %q", code, errs)
	}
}

func TestCLIUnknownInterface(t *testing.T) {
	dir := t.TempDir()
	var s seq
	s.add("pod-z", arpRequest(macA, "10.0.0.10", "10.0.0.11"))
	s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.11"))
	var in bytes.Buffer
	if err := capture.WriteFrames(&in, "ufp-replay", nil, s.frames); err != nil {
		t.Fatal(err)
	}
	inPath := writeFile(t, filepath.Join(dir, "in.pcapng"), in.Bytes())
	code, out, errs := ufp(t, "-policy", qsPolicy, "-in", inPath, "-trace", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"#1 +0.000000s in pod-z 60B arp who-has 10.0.0.11 tell 10.0.0.10",
		`  => drop: interface "pod-z" is no port of the policy` + "\n#2 ",
		"#2 +0.001000s in pod-a",
		"summary: 2 in, 1 out, 1 dropped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace does not contain %q:\n%s", want, out)
		}
	}
}

func TestCLICheckTraceDiff(t *testing.T) {
	dir := copyScenario(t, filepath.Join("..", "..", "testdata", "scenarios", "arp"))
	if code, out, errs := ufp(t, "-check", dir); code != 0 || out != "ok "+dir+"\n" {
		t.Fatalf("unaltered copy: exit %d\n%s%s", code, out, errs)
	}
	path := filepath.Join(dir, "want-trace.txt")
	orig := string(readFile(t, path))
	const line = "  port pod-a: arp: who-has 10.0.0.99: unknown address, not flooded"
	if !strings.Contains(orig, line+"\n") {
		t.Fatalf("want-trace.txt has no line %q", line)
	}
	altered := strings.Replace(orig, line, "  port pod-a: arp: who-has 10.0.0.99: flooded", 1)
	writeFile(t, path, []byte(altered))
	code, out, errs := ufp(t, "-check", dir)
	if code != 1 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"ufp-replay: " + dir + ": output differs from the golden files:\n",
		"trace (- want, + got):\n",
		"\n-   port pod-a: arp: who-has 10.0.0.99: flooded\n",
		"\n+ " + line + "\n",
		// Removals before additions.
		"\n    slow path\n-   port pod-a: arp: who-has 10.0.0.99: flooded\n+ " + line + "\n    => drop: no-destination\n",
		// Context around the change.
		"\n  #3 +0.002000s in pod-a 60B arp who-has 10.0.0.99",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not contain %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "frames:") {
		t.Errorf("frames reported as differing:\n%s", out)
	}
	// -update rewrites the golden files; -check then passes.
	if code, out, errs := ufp(t, "-check", dir, "-update"); code != 0 || out != "updated "+dir+"\n" {
		t.Fatalf("-update: exit %d\n%s%s", code, out, errs)
	}
	if got := string(readFile(t, path)); got != orig {
		t.Errorf("-update wrote a different trace:\n%s", DiffLines(orig, got))
	}
	if code, _, _ := ufp(t, "-check", dir); code != 0 {
		t.Errorf("-check after -update: exit %d", code)
	}
}

func TestCLICheckFrameDiff(t *testing.T) {
	dir := copyScenario(t, filepath.Join("..", "..", "testdata", "scenarios", "pod-to-pod"))
	path := filepath.Join(dir, "want.pcapng")
	want, err := capture.ReadFrames(readFile(t, path))
	if err != nil || len(want) < 3 {
		t.Fatalf("want.pcapng: %d frames, %v", len(want), err)
	}
	ports := inputPorts(t, dir)
	write := func(frames []capture.Frame) {
		var b bytes.Buffer
		if err := capture.WriteFrames(&b, "ufp-replay", ports, frames); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, b.Bytes())
	}

	altered := append([]capture.Frame{}, want...)
	altered[1].Data = patch(altered[1].Data, 20, altered[1].Data[20]^0xff)
	write(altered)
	code, out, errs := ufp(t, "-check", dir)
	if code != 1 || errs != "" {
		t.Fatalf("altered frame: exit %d, stderr %q", code, errs)
	}
	for _, w := range []string{"frames:\n  frame 2:\n    want out ", "\n    got  out ", "first differing byte at offset 20: want "} {
		if !strings.Contains(out, w) {
			t.Errorf("output does not contain %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "trace (- want") {
		t.Errorf("trace reported as differing:\n%s", out)
	}

	write(want[:len(want)-1])
	if code, out, _ = ufp(t, "-check", dir); code != 1 || !strings.Contains(out, "unexpected: out ") ||
		!strings.Contains(out, "want "+strconv.Itoa(len(want)-1)+" frames, got "+strconv.Itoa(len(want))) {
		t.Errorf("missing frame: exit %d\n%s", code, out)
	}

	writeFile(t, path, []byte("garbage"))
	if code, _, errs = ufp(t, "-check", dir); code != 1 || !strings.Contains(errs, "want.pcapng: not a pcapng file") {
		t.Errorf("garbage want.pcapng: exit %d, stderr %q", code, errs)
	}
	os.Remove(path)
	if code, _, errs = ufp(t, "-check", dir); code != 1 || !strings.Contains(errs, "want.pcapng") {
		t.Errorf("missing want.pcapng: exit %d, stderr %q", code, errs)
	}
}

func TestCLIOutAndTrace(t *testing.T) {
	dir := t.TempDir()
	outPath, tracePath := filepath.Join(dir, "out.pcapng"), filepath.Join(dir, "trace.txt")
	code, out, errs := ufp(t, "-policy", qsPolicy, "-in", qsIn, "-out", outPath, "-trace", tracePath)
	if code != 0 || out != "" || errs != "" {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	if got, want := string(readFile(t, tracePath)), string(readFile(t, filepath.Join("quickstart", "want-trace.txt"))); got != want {
		t.Errorf("trace file differs:\n%s", DiffLines(want, got))
	}
	got, err := capture.ReadFrames(readFile(t, outPath))
	if err != nil {
		t.Fatal(err)
	}
	want, err := capture.ReadFrames(readFile(t, filepath.Join("quickstart", "want.pcapng")))
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffFrames(want, got, 0); d != "" || len(got) == 0 {
		t.Errorf("-out frames differ from quickstart/want.pcapng (%d frames):\n%s", len(got), d)
	}
	if !bytes.Equal(readFile(t, outPath), readFile(t, filepath.Join("quickstart", "want.pcapng"))) {
		t.Errorf("-out file is not byte for byte the golden file")
	}
	// An -out path that cannot be created.
	code, _, errs = ufp(t, "-policy", qsPolicy, "-in", qsIn, "-out", filepath.Join(dir, "no", "such", "dir.pcapng"))
	if code != 1 || !strings.Contains(errs, "no such file or directory") {
		t.Errorf("bad -out: exit %d, stderr %q", code, errs)
	}
}

func TestCLIThen(t *testing.T) {
	dir := t.TempDir()
	// block.json: pod-b takes nothing in any more.
	block := strings.Replace(string(readFile(t, qsPolicy)), `"action": {"type": "allow"}`, `"action": {"type": "block"}`, 1)
	if block == string(readFile(t, qsPolicy)) {
		t.Fatal("quickstart policy has no allow action to replace")
	}
	blockPath := writeFile(t, filepath.Join(dir, "block.json"), []byte(block))
	badPath := writeFile(t, filepath.Join(dir, "bad.json"), []byte(`{"ports": []}`))
	code, out, errs := ufp(t, "-policy", qsPolicy, "-in", qsIn, "-trace", "-",
		"-then", "4="+badPath, "-then", "5="+blockPath, "-then", "99="+blockPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"policy bad.json rejected, running policy kept: ports: a switch needs at least one port\n#4 ",
		"policy block.json applied: generation 2\n#5 ",
		"group ingress rule allow-web (priority 100, stateful) -> block",
		"policy block.json not applied: the input has no packet 99\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace does not contain %q:\n%s", want, out)
		}
	}
	// Before the change, packet 4 of the connection took the fast path; after
	// it, packet 5 is revalidated and blocked.
	i4, i5 := strings.Index(out, "#4 "), strings.Index(out, "#5 ")
	if i4 < 0 || i5 < 0 || !strings.Contains(out[i4:i5], "fast path") || !strings.Contains(out[i5:], "=> drop: blocked") {
		t.Errorf("packets 4 and 5:\n%s", out[i4:])
	}
}

func TestReadFrames(t *testing.T) {
	var s seq
	s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.11"))
	s.add("pod-b", udp(macB, macA, "10.0.0.11", 53, "10.0.0.10", 5000, "x"))
	s.add("pod-a", udp(macA, macB, "10.0.0.10", 5000, "10.0.0.11", 53, "y"))
	var b bytes.Buffer
	if err := capture.WriteFrames(&b, "ufp-replay", []string{"uplink", "pod-b"}, s.frames); err != nil {
		t.Fatal(err)
	}
	got, err := capture.ReadFrames(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffFrames(s.frames, got, 0); d != "" {
		t.Errorf("round trip:\n%s", d)
	}
	// Interfaces are the ports given, then the others in order of use.
	r, err := pcapgo.NewNgReader(bytes.NewReader(b.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.ReadPacketData(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range r.NInterfaces() {
		intf, _ := r.Interface(i)
		names = append(names, intf.Name)
	}
	if strings.Join(names, ",") != "uplink,pod-b,pod-a" {
		t.Errorf("interfaces %v", names)
	}

	// No frames at all.
	b.Reset()
	if err := capture.WriteFrames(&b, "ufp-replay", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := capture.ReadFrames(b.Bytes()); err != nil || len(got) != 0 {
		t.Errorf("empty capture: %d frames, %v", len(got), err)
	}

	for _, tt := range []struct {
		name  string
		link  layers.LinkType
		capLn int
		want  string
	}{
		{"not Ethernet", layers.LinkTypeRaw, 0, `packet 1: interface "raw" has link type`},
		{"truncated capture", layers.LinkTypeEthernet, 10, "packet 1: captured 10 of 60 bytes; replay needs whole frames"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "raw", LinkType: tt.link}, pcapgo.DefaultNgWriterOptions)
			if err != nil {
				t.Fatal(err)
			}
			data := s.frames[0].Data
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(data), Length: len(data)}
			if tt.capLn > 0 {
				data = data[:tt.capLn]
				ci.CaptureLength = tt.capLn
			}
			if err := w.WritePacket(ci, data); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if _, err := capture.ReadFrames(b.Bytes()); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadFrames error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDiffLines(t *testing.T) {
	if d := DiffLines("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("equal texts: %q", d)
	}
	want := "@@ line 4 @@\n  b\n  c\n- d\n+ D\n+ E\n  e\n  f\n"
	if d := DiffLines("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\nE\ne\nf\ng\n"); d != want {
		t.Errorf("DiffLines =\n%s\nwant\n%s", d, want)
	}
}
