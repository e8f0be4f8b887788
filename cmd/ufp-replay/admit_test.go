package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/vswitch"
)

// TestReplayNotForThisSwitch replays, on the nat-udp scenario's policy, a
// reply from the router to another station's MAC on the underlay: a frame
// the promiscuous uplink reads but ufpd drops as not for this switch. The
// replay drops it too, before the reply flow cached for its 5-tuple, and
// says so as `ufpctl trace` does; the reply to the host's MAC after it
// still takes the fast path.
func TestReplayNotForThisSwitch(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(scenarioDir("nat-udp"), "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := vswitch.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	var s seq
	s.add("pod-a", udp(macA, macRouter, natPodA, 41000, natFar, 53, "query"))
	s.add("uplink", udp(macRouter, "02:00:00:00:77:77", natFar, 53, natHost, 41000, "for another"))
	s.add("uplink", udp(macRouter, macUp, natFar, 53, natHost, 41000, "answer"))
	var in bytes.Buffer
	if err := capture.WriteFrames(&in, "ufp-replay", portNames(policy), s.frames); err != nil {
		t.Fatal(err)
	}
	res, err := Run(&Scenario{Policy: policy, In: in.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#2 +0.001000s in uplink 60B ipv4 udp 203.0.113.5:53 > 192.168.1.10:41000\n" +
			"  port uplink: dst 02:00:00:00:77:77 is no MAC of this switch: not for us\n" +
			"  => drop: not-for-this-switch\n" +
			"#3 ",
		"  fast path: udp 203.0.113.5:53 > 192.168.1.10:41000 (generation 1, packet 1)\n",
		"summary: 3 in, 2 out, 1 dropped; fast path 1, slow path 1\n",
		"  drops by reason: not-for-this-switch=1\n",
	} {
		if !strings.Contains(res.Trace, want) {
			t.Errorf("the trace has no\n%s\nin\n%s", want, res.Trace)
		}
	}
	if len(res.Out) != 2 || res.Out[1].Port != "pod-a" || !bytes.Contains(res.Out[1].Data, []byte("answer")) {
		t.Errorf("out: %d frames, want the query to the uplink and the answer to pod-a", len(res.Out))
	}
}
