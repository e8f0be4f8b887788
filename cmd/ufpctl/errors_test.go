package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrors checks that ufpd's refusals exit 1 with its message, usage
// errors exit 2 with the usage text, and nothing goes to standard output.
func TestErrors(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	for _, tc := range []struct {
		name string
		args []string
		code int
		// want is in standard error (standard output for help).
		want []string
	}{
		{"unknown port in trace", []string{"trace", "nope", "tcp", "10.244.1.10:40000", "10.244.1.11:22"}, 1,
			[]string{"ufpctl: trace: port: no port \"nope\"\n"}},
		{"bad source address", []string{"trace", "pod-a", "tcp", "10.244.1.300:40000", "10.244.1.11:22"}, 2,
			[]string{`ufpctl trace: SRC: "10.244.1.300:40000" is not an address or address:port (IPv6 with a port is [addr]:port)`, "usage: ufpctl trace PORT PROTO"}},
		{"IPv6 with a port unbracketed", []string{"trace", "pod-a", "tcp", "fd00::10", "fd00::11:22:x"}, 2,
			[]string{`ufpctl trace: DST: "fd00::11:22:x" is not an address`}},
		{"bad protocol", []string{"trace", "pod-a", "tcpp", "10.244.1.10:40000", "10.244.1.11:22"}, 2,
			[]string{`ufpctl trace: PROTO: "tcpp" is not tcp, udp, icmp, icmpv6 or a protocol number`}},
		{"mixed families", []string{"trace", "pod-a", "tcp", "10.244.1.10:40000", "[fd00::11]:22"}, 1,
			[]string{"ufpctl: trace: dst: fd00::11 is not of src 10.244.1.10's family\n"}},
		{"port on icmp", []string{"trace", "pod-a", "icmp", "10.244.1.10", "10.244.1.11:22"}, 1,
			[]string{"ufpctl: trace: dstPort: icmp has no ports\n"}},
		{"bad tcp flags", []string{"trace", "pod-a", "tcp", "10.244.1.10:1", "10.244.1.11:22", "-flags", "SX"}, 1,
			[]string{`ufpctl: trace: tcpFlags: "SX": 'X' is not a flag`}},
		{"bad MAC", []string{"trace", "pod-a", "tcp", "10.244.1.10:1", "10.244.1.11:22", "-src-mac", "zz"}, 1,
			[]string{"ufpctl: trace: srcMAC:"}},
		{"bad vxlan", []string{"trace", "uplink", "tcp", "10.244.2.5:1", "10.244.1.11:22", "-vxlan", "192.168.50.2"}, 2,
			[]string{`ufpctl trace: -vxlan: "192.168.50.2": want OUTERSRC[>OUTERDST]/VNI`}},
		{"bad icmp type", []string{"trace", "pod-a", "icmp", "10.244.1.10", "10.244.1.11", "-icmp-type", "300"}, 2,
			[]string{"ufpctl trace: -icmp-type: 300 is not 0-255"}},
		{"trace arguments missing", []string{"trace", "pod-a", "tcp"}, 2, []string{"ufpctl trace: missing arguments", "usage: ufpctl trace"}},
		{"trace flag unknown", []string{"trace", "pod-a", "tcp", "10.244.1.10:1", "10.244.1.11:22", "-flag", "S"}, 2,
			[]string{"ufpctl trace: flag provided but not defined: -flag", "-flags flags"}},
		{"unknown port in layers", []string{"layers", "nope"}, 1, []string{"ufpctl: port nope: no port \"nope\"\n"}},
		{"unknown port in rules", []string{"rules", "nope"}, 1, []string{"ufpctl: port nope: no port \"nope\"\n"}},
		{"unknown port in rules -o json", []string{"rules", "nope", "-o", "json"}, 1, []string{"ufpctl: port nope: no port \"nope\"\n"}},
		{"unknown port in flows", []string{"flows", "-port", "nope"}, 1, []string{"ufpctl: flows: port: no port \"nope\"\n"}},
		{"bad flow prefix", []string{"flows", "-src", "10.0.0.0/33"}, 2, []string{`ufpctl flows: -src: "10.0.0.0/33" is not an address or prefix`}},
		{"bad flow port", []string{"flows", "flush", "-dport", "0"}, 2, []string{`ufpctl flows: -dport: "0" is not a port (1-65535)`}},
		{"flows subcommand", []string{"flows", "purge"}, 2, []string{`ufpctl flows: "purge": the only subcommand is flush`}},
		{"unknown endpoint", []string{"endpoint", "nope"}, 1, []string{"ufpctl: endpoint nope: no such endpoint\n"}},
		{"extra arguments", []string{"ports", "pod-a"}, 2, []string{`ufpctl ports: unexpected arguments ["pod-a"]`, "usage: ufpctl ports"}},
		{"bad output format", []string{"-o", "yaml", "ports"}, 2, []string{`ufpctl ports: -o "yaml": want table or json`}},
		{"unknown command", []string{"portz"}, 2, []string{`ufpctl: unknown command "portz"`, "usage: ufpctl [-s SOCKET]"}},
		{"no command", nil, 2, []string{"usage: ufpctl [-s SOCKET] [-o table|json] COMMAND"}},
		{"unknown global flag", []string{"-x", "ports"}, 2, []string{"ufpctl: flag provided but not defined: -x", "usage: ufpctl"}},
		{"help", []string{"help"}, 0, []string{"usage: ufpctl", "trace", "capture"}},
		{"help trace", []string{"help", "trace"}, 0, []string{"usage: ufpctl trace PORT PROTO SRC[:PORT] DST[:PORT]", "-vxlan OUTERSRC[>OUTERDST]/VNI"}},
		{"trace -h", []string{"trace", "-h"}, 0, []string{"usage: ufpctl trace"}},
		{"-h", []string{"-h"}, 0, []string{"usage: ufpctl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, d, "", tc.args...)
			got := r.stderr
			if tc.code == 0 {
				got = r.stdout
				if r.stderr != "" {
					t.Errorf("stderr: %q", r.stderr)
				}
			} else if r.stdout != "" {
				t.Errorf("stdout on failure: %q", r.stdout)
			}
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\n%v", r.code, tc.code, r)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%v", w, r)
				}
			}
		})
	}
}

// TestNotRunning checks the error when no ufpd answers: it names the
// socket and says what to check.
func TestNotRunning(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "ufpd.sock")
	for _, args := range [][]string{{"-s", sock, "status"}, {"ports", "-s", sock}, {"-s", sock, "trace", "pod-a", "tcp", "10.0.0.1:1", "10.0.0.2:2"}} {
		r := ctl(t, nil, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "ufpctl: cannot reach ufpd at "+sock+": ") ||
			!strings.Contains(r.stderr, "(is ufpd running? the socket is -s or $UFPCTL_SOCKET)") || r.stdout != "" {
			t.Errorf("ufpctl %s: %v", strings.Join(args, " "), r)
		}
	}
	// A socket no one listens on (a ufpd that died).
	f, err := os.Create(sock)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := ctl(t, nil, "", "-s", sock, "status")
	if r.code != 1 || !strings.Contains(r.stderr, sock) {
		t.Errorf("a stale socket: %v", r)
	}
	// The environment names the socket when -s does not.
	r = ctl(t, &ufpd{socket: sock + ".env"}, "", "status")
	if r.code != 1 || !strings.Contains(r.stderr, sock+".env") {
		t.Errorf("$UFPCTL_SOCKET: %v", r)
	}
}
