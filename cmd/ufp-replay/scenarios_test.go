package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/vswitch"
)

var update = flag.Bool("update", false, "rewrite scenario inputs and golden outputs")

// scenarios builds the input of each golden scenario. The policies are
// hand-written files beside the inputs.
var scenarios = map[string]func() []capture.Frame{
	"quickstart": func() []capture.Frame {
		var s seq
		s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.11"))
		s.add("pod-a", tcp(macA, macB, "10.0.0.10", 40000, "10.0.0.11", 80, "S", ""))
		s.add("pod-b", tcp(macB, macA, "10.0.0.11", 80, "10.0.0.10", 40000, "SA", ""))
		s.add("pod-a", tcp(macA, macB, "10.0.0.10", 40000, "10.0.0.11", 80, "A", ""))
		s.add("pod-a", tcp(macA, macB, "10.0.0.10", 40000, "10.0.0.11", 80, "PA", "GET / HTTP/1.1\r\n\r\n"))
		s.add("pod-a", tcp(macA, macB, "10.0.0.10", 40001, "10.0.0.11", 22, "S", ""))
		s.add("pod-a", tcp(macA, macB, "10.0.0.10", 40000, "10.0.0.11", 80, "A", "")[:30])
		return s.frames
	},
	"arp": func() []capture.Frame {
		var s seq
		s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.11"))
		s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.1"))
		s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.99"))
		s.add("pod-a", arpRequest(macA, "10.0.0.10", "10.0.0.10"))
		s.add("pod-a", arpRequest(macA, "10.0.0.11", "10.0.0.1"))
		s.add("pod-b", arpRequest(macB, "10.0.0.11", "10.0.0.10"))
		s.add("pod-a", arp(macA, macB, layers.ARPReply, macA, "10.0.0.10", macB, "10.0.0.11"))
		s.add("pod-a", neighborSolicit(macA, "fd00::10", "fd00::11"))
		s.add("pod-a", neighborSolicit(macA, "fd00::10", "fd00::1"))
		s.add("pod-a", neighborSolicit(macA, "::", "fd00::10"))
		s.add("pod-a", vlanTag(arpRequest(macA, "10.0.0.10", "10.0.0.11"), 7))
		return s.frames
	},
	"pod-to-pod": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "S", ""))
		s.add("pod-b", tcp(macB, macA, b, 8080, a, 33000, "SA", ""))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "A", ""))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "PA", "hello"))
		s.add("pod-b", tcp(macB, macA, b, 8080, a, 33000, "PA", "world"))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "FA", ""))
		s.add("pod-b", tcp(macB, macA, b, 8080, a, 33000, "FA", ""))
		s.add("pod-a", tcp(macA, macB, a, 33000, b, 8080, "A", ""))
		s.add("pod-a", udp(macA, macB, "fd00::10", 5000, "fd00::11", 53, "query"))
		s.add("pod-b", udp(macB, macA, "fd00::11", 53, "fd00::10", 5000, "answer"))
		s.add("pod-a", udp(macA, macB, "fd00::10", 5000, "fd00::11", 53, "query2"))
		s.add("pod-a", icmpEcho(macA, macB, a, b, false, 7, 1))
		s.add("pod-b", icmpEcho(macB, macA, b, a, true, 7, 1))
		s.add("pod-a", icmpEcho(macA, macB, a, b, false, 7, 2))
		s.add("pod-a", icmpEcho(macA, macB, "fd00::10", "fd00::11", false, 8, 1))
		s.add("pod-a", udp(macA, macGW, a, 6000, "10.0.1.12", 7000, "routed"))
		s.add("pod-a", udp(macA, bcast, a, 68, "10.0.0.255", 67, "broadcast"))
		s.add("pod-a", udp(macA, "02:00:00:00:99:99", a, 6000, "10.0.0.99", 7000, "unknown"))
		s.add("pod-a", udp(macA, macB, "10.0.0.50", 6000, b, 7000, "spoofed"))
		s.add("pod-a", udp(macA, macA, a, 6000, a, 7000, "hairpin"))
		return s.frames
	},
	"fast-path": func() []capture.Frame {
		var s seq
		a, vip := "10.0.0.10", "10.96.0.10"
		for i, p := range []string{"q1", "q2-longer", "q3", "q4-much-longer-payload", "q5"} {
			_ = i
			s.add("pod-a", udp(macA, macGW, a, 40000, vip, 53, p))
		}
		s.add("pod-b", udp(macB, macA, "10.0.0.11", 5353, a, 40000, "answer"))
		s.add("pod-a", udp(macA, macGW, a, 40001, vip, 53, "other-flow"))
		s.add("pod-a", udp(macA, macGW, a, 40001, vip, 53, "other-flow-again"))
		return s.frames
	},
	"multi-layer": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		s.add("pod-a", tcp(macA, macB, a, 1000, b, 80, "S", ""))
		s.add("pod-b", tcp(macB, macA, b, 80, a, 1000, "SA", ""))
		s.add("pod-a", tcp(macA, macB, a, 1001, b, 23, "S", ""))
		s.add("pod-a", tcp(macA, macB, a, 1002, b, 8080, "S", ""))
		s.add("pod-a", tcp(macA, macB, a, 1003, b, 22, "S", ""))
		s.add("pod-a", udp(macA, macB, a, 1004, b, 53, "dns"))
		s.add("pod-b", udp(macB, macA, b, 53, a, 1004, "dns-answer"))
		s.add("pod-a", udp(macA, macB, a, 1005, b, 123, "ntp"))
		s.add("pod-a", tcp(macA, "02:00:00:00:99:01", a, 1006, "10.0.2.5", 443, "S", ""))
		s.add("pod-a", tcp(macA, "02:00:00:00:99:01", a, 1007, "10.0.3.5", 443, "S", ""))
		s.add("pod-b", tcp(macB, macA, b, 2000, a, 80, "S", ""))
		return s.frames
	},
	"revalidation": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "S", ""))
		s.add("pod-b", tcp(macB, macA, b, 80, a, 50000, "SA", ""))
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "A", ""))
		s.add("pod-a", udp(macA, macB, a, 5000, b, 5001, "udp-1"))
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "PA", "before"))
		// policy@6: web no longer allowed in.
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "PA", "blocked"))
		s.add("pod-b", tcp(macB, macA, b, 80, a, 50000, "PA", "reply"))
		s.add("pod-a", udp(macA, macB, a, 5000, b, 5001, "udp-2"))
		// policy@9: web allowed again.
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "PA", "allowed"))
		s.add("pod-b", tcp(macB, macA, b, 80, a, 50000, "PA", "reply"))
		// policy@11 is invalid: rejected, generation 3 stays.
		s.add("pod-a", tcp(macA, macB, a, 50000, b, 80, "PA", "still-allowed"))
		s.add("pod-a", udp(macA, macB, a, 5000, b, 5001, "udp-3"))
		return s.frames
	},
	"malformed": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		good := tcp(macA, macB, a, 1000, b, 80, "S", "")
		goodUDP := udp(macA, macB, a, 1000, b, 53, "x")
		good6 := udp(macA, macB, "fd00::10", 1000, "fd00::11", 53, "x")
		s.add("pod-a", good[:10])
		s.add("pod-a", vlanTag(good, 1)[:16])
		s.add("pod-a", arpRequest(macA, a, b)[:30])
		s.add("pod-a", patch(arpRequest(macA, a, b), 14, 0, 6))
		s.add("pod-a", good[:24])
		s.add("pod-a", patch(good, 14, 0x44))
		s.add("pod-a", patch(good, 16, 0, 10))
		s.add("pod-a", patch(good, 16, 0x05, 0xdc))
		s.add("pod-a", patch(good, 14+20+12, 0x30))
		s.add("pod-a", patch(good, 16, 0, 30)[:44])
		s.add("pod-a", patch(goodUDP, 14+20+4, 0, 4))
		s.add("pod-a", patch(icmpEcho(macA, macB, a, b, false, 1, 1), 16, 0, 24)[:38])
		s.add("pod-a", patch(good6, 18, 0x05, 0xdc))
		s.add("pod-a", patch(good6, 14, 0x40))
		s.add("pod-a", patch(patch(good6, 14+6, 60), 18, 0, 4))
		s.add("pod-a", patch(bytes.Repeat([]byte{0x5a}, 64), 0, 0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x88, 0xb5))
		s.add("pod-a", fixIPv4Checksum(patch(udp(macA, macB, a, 1000, b, 53, "fragment-payload"), 14+6, 0x00, 0x10)))
		s.add("pod-a", good)
		return s.frames
	},
	"overlay-push-pop": func() []capture.Frame {
		var s seq
		a, r := "10.244.0.10", "10.244.1.5"
		remoteMAC := "02:00:00:00:01:0a"
		hostB := "02:00:00:00:01:fe"
		encap := func(vni uint32, inner []byte) []byte {
			return vxlan(hostB, macUp, "192.168.1.20", "192.168.1.10", 51000, vni, inner)
		}
		s.add("pod-a", arpRequest(macA, a, "10.244.0.1"))
		s.add("pod-a", tcp(macA, macGW, a, 45000, r, 80, "S", ""))
		s.add("uplink", encap(4096, tcp(remoteMAC, macA, r, 80, a, 45000, "SA", "")))
		s.add("pod-a", tcp(macA, macGW, a, 45000, r, 80, "A", ""))
		s.add("pod-a", udp(macA, macGW, a, 46000, r, 53, "query"))
		s.add("uplink", encap(4096, udp(remoteMAC, macA, r, 53, a, 46000, "answer")))
		s.add("uplink", encap(4096, udp(remoteMAC, macA, r, 53, a, 46000, "answer-2")))
		s.add("uplink", encap(4097, udp(remoteMAC, macA, r, 53, a, 46000, "wrong-vni")))
		s.add("uplink", patch(encap(4096, udp(remoteMAC, macA, r, 53, a, 46000, "bad-flags")), 14+20+8, 0x00))
		s.add("pod-a", icmpEcho(macA, macGW, a, r, false, 9, 1))
		s.add("uplink", encap(4096, icmpEcho(remoteMAC, macA, r, a, true, 9, 1)))
		return s.frames
	},
	"flow-table-limits": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
		s.addAt(ms(0), "pod-a", udp(macA, macB, a, 1001, b, 9000, "f1"))
		s.addAt(ms(100), "pod-a", udp(macA, macB, a, 1002, b, 9000, "f2"))
		s.addAt(ms(200), "pod-b", udp(macB, macA, b, 9000, a, 1001, "f1-reply"))
		s.addAt(ms(300), "pod-a", udp(macA, macB, a, 1003, b, 9000, "f4"))
		s.addAt(ms(400), "pod-a", udp(macA, macB, a, 1004, b, 9000, "f5-evicts-f2"))
		s.addAt(ms(500), "pod-a", udp(macA, macB, a, 1002, b, 9000, "f2-again-evicts-f1-pair"))
		s.addAt(ms(3000), "pod-a", udp(macA, macB, a, 1003, b, 9000, "after-idle"))
		s.addAt(ms(3100), "pod-a", tcp(macA, macB, a, 2000, b, 80, "S", ""))
		s.addAt(ms(3200), "pod-b", tcp(macB, macA, b, 80, a, 2000, "SA", ""))
		s.addAt(ms(3300), "pod-b", tcp(macB, macA, b, 80, a, 2000, "R", ""))
		s.addAt(ms(4600), "pod-a", udp(macA, macB, a, 1005, b, 9000, "after-rst"))
		s.addAt(ms(5000), "pod-a", tcp(macA, macB, a, 2001, b, 80, "S", ""))
		s.addAt(ms(5100), "pod-b", tcp(macB, macA, b, 80, a, 2001, "SA", ""))
		s.addAt(ms(5200), "pod-a", tcp(macA, macB, a, 2001, b, 80, "FA", ""))
		s.addAt(ms(5300), "pod-b", tcp(macB, macA, b, 80, a, 2001, "FA", ""))
		s.addAt(ms(5400), "pod-a", tcp(macA, macB, a, 2001, b, 80, "S", ""))
		return s.frames
	},
	"flow-table-refuse": func() []capture.Frame {
		var s seq
		a, b := "10.0.0.10", "10.0.0.11"
		s.add("pod-a", udp(macA, macB, a, 1001, b, 9000, "f1"))
		s.add("pod-a", udp(macA, macB, a, 1002, b, 9000, "f2"))
		s.add("pod-a", udp(macA, macB, a, 1003, b, 9000, "f3-refused"))
		s.add("pod-a", udp(macA, macB, a, 1001, b, 9000, "f1-still-fast"))
		return s.frames
	},
}

func scenarioDir(name string) string {
	if name == "quickstart" {
		return "quickstart"
	}
	return filepath.Join("..", "..", "testdata", "scenarios", name)
}

// TestScenarios replays every golden scenario and compares its output
// pcapng and trace with the golden files. With -update it regenerates the
// inputs and the golden files.
func TestScenarios(t *testing.T) {
	ents, err := os.ReadDir(filepath.Join("..", "..", "testdata", "scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := scenarios[e.Name()]; !ok {
			t.Errorf("testdata/scenarios/%s has no input generator in scenarios", e.Name())
		}
	}
	for name, gen := range scenarios {
		t.Run(name, func(t *testing.T) {
			dir := scenarioDir(name)
			var in bytes.Buffer
			if err := capture.WriteFrames(&in, "ufp-replay", inputPorts(t, dir), gen()); err != nil {
				t.Fatal(err)
			}
			inPath := filepath.Join(dir, "in.pcapng")
			if *update {
				if err := os.WriteFile(inPath, in.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if old, err := os.ReadFile(inPath); err != nil || !bytes.Equal(old, in.Bytes()) {
				t.Fatalf("%s is missing or differs from what the generator makes now; run go test ./cmd/ufp-replay -update", inPath)
			}
			args := []string{"-check", dir}
			if *update {
				args = append(args, "-update")
			}
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != 0 {
				t.Fatalf("ufp-replay %v: exit %d\n%s%s", args, code, out.String(), errb.String())
			}
		})
	}
}

// inputPorts returns the policy's port names, so that input interfaces are
// numbered in policy order.
func inputPorts(t *testing.T, dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := vswitch.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return portNames(sc)
}
