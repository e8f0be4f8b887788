package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/vswitch"
)

// Scenario is one replay: a policy, packets to feed in, and policy changes
// to apply on the way.
type Scenario struct {
	Policy *vswitch.Config
	// Changes are applied before the packet with the given 1-based number.
	Changes []Change
	// In is a pcapng whose interfaces are named after switch ports.
	In []byte
}

// Change is a policy document applied mid-replay. An invalid one is
// rejected, traced, and leaves the running policy in place.
type Change struct {
	Before int
	Name   string
	Raw    []byte
}

// Result is what a replay produced.
type Result struct {
	Out   []capture.Frame
	Trace string
}

// Run replays sc through a new switch and returns what came out.
func Run(sc *Scenario) (*Result, error) {
	in, err := capture.ReadFrames(sc.In)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	sw, err := vswitch.New(sc.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	pl := sw.Pipeline()
	w := pl.NewWorker()
	tr := &dataplane.Trace{}
	w.Trace = tr
	vx := vxlanPort(sc.Policy)
	res := &Result{}
	var out strings.Builder
	pkt := dataplane.NewPacket(dataplane.BufferSize)
	batch := []*dataplane.Packet{pkt}
	var sg dataplane.Segmenter // fragments the packets marked so
	var t0 time.Time
	outBy := map[string]int{}
	var nOut, nDrop, nRejected int
	for i, f := range in {
		n := i + 1
		for _, c := range sc.Changes {
			if c.Before == n {
				cfg, err := vswitch.ParseConfig(c.Raw)
				if err == nil {
					err = sw.Apply(cfg)
				}
				if err != nil {
					fmt.Fprintf(&out, "policy %s rejected, running policy kept: %v\n", c.Name, err)
				} else {
					fmt.Fprintf(&out, "policy %s applied: generation %d\n", c.Name, sw.Generation())
				}
			}
		}
		if i == 0 {
			t0 = f.Time
		}
		now := int64(f.Time.Sub(t0))
		if k := pl.FlowTable().Expire(now); k > 0 {
			fmt.Fprintf(&out, "expired %d flows at +%.6fs\n", k, time.Duration(now).Seconds())
		}
		fmt.Fprintf(&out, "#%d +%.6fs in %s %dB %s\n", n, time.Duration(now).Seconds(), f.Port, len(f.Data), vswitch.Describe(f.Data, vx))
		port := sw.Port(f.Port)
		if port == nil {
			fmt.Fprintf(&out, "  => drop: interface %q is no port of the policy\n", f.Port)
			nDrop++
			continue
		}
		if !pkt.SetFrame(f.Data) {
			fmt.Fprintf(&out, "  => drop: %s\n", dataplane.DropFrameTooLarge)
			pl.Drops.Add(dataplane.DropFrameTooLarge)
			nDrop++
			continue
		}
		pkt.InPort = port.ID
		tr.Reset()
		held := w.HeldFragments()
		w.Process(batch, now)
		// Held fragments that went without being released: their time
		// ran out, or their datagram was refused (the trace says why).
		if pkt.Path == dataplane.PathHeld {
			held++
		}
		gone := held - w.HeldFragments() - len(w.Released())
		switch {
		case pkt.Path == dataplane.PathFast && w.Flow != nil:
			fmt.Fprintf(&out, "  fast path: %s (generation %d, packet %d)\n", w.Flow.Key(), w.Flow.Action().Gen, w.Flow.Packets())
		case pkt.Path == dataplane.PathFast:
			fmt.Fprintf(&out, "  fast path\n")
		case pkt.Path == dataplane.PathSlow && w.Flow != nil:
			fmt.Fprintf(&out, "  slow path: %s\n", w.Flow.Key())
		case pkt.Path == dataplane.PathSlow:
			fmt.Fprintf(&out, "  slow path\n")
		}
		for _, l := range tr.Lines() {
			fmt.Fprintf(&out, "  %s\n", l)
		}
		if gone > 0 {
			fmt.Fprintf(&out, "  => %d held fragments dropped\n", gone)
			nDrop += gone
		}
		if pkt.Path == dataplane.PathHeld {
			fmt.Fprintf(&out, "  => held\n")
			continue
		}
		// The packet, then the held fragments it released (its later
		// fragments, which came before it).
		ht := ""
		if w.Flow != nil {
			ht = w.Flow.Action().HT.String()
		}
		for i, p := range append([]*dataplane.Packet{pkt}, w.Released()...) {
			indent := "  "
			if i > 0 {
				fmt.Fprintf(&out, "  released %dB %s\n", p.Len(), vswitch.Describe(p.Bytes(), vx))
				indent = "    "
			}
			if p.Drop != dataplane.NotDropped {
				fmt.Fprintf(&out, "%s=> drop: %s\n", indent, p.Drop)
				nDrop++
				continue
			}
			op := sw.PortByID(p.OutPort)
			if op == nil {
				fmt.Fprintf(&out, "%s=> drop: output port %d is gone\n", indent, p.OutPort)
				nDrop++
				continue
			}
			if i == 0 && ht != "" {
				fmt.Fprintf(&out, "  ht: %s\n", ht)
			}
			if p.Rejected != dataplane.NotDropped {
				nRejected++
			}
			// A packet marked for fragmentation leaves as its fragments,
			// as the switch's egress sends them.
			frames, ok := sg.Segment(p)
			if !ok {
				fmt.Fprintf(&out, "%s=> drop: the egress cannot fragment it (%+v)\n", indent, p.Frag)
				nDrop++
				continue
			}
			for _, fp := range frames {
				data := slices.Clone(fp.Bytes())
				fmt.Fprintf(&out, "%s=> out %s %dB %s\n", indent, op.Name, len(data), vswitch.Describe(data, vx))
				res.Out = append(res.Out, capture.Frame{Port: op.Name, Time: f.Time, Data: data})
				outBy[op.Name]++
				nOut++
			}
		}
	}
	for _, c := range sc.Changes {
		if c.Before < 1 || c.Before > len(in) {
			fmt.Fprintf(&out, "policy %s not applied: the input has no packet %d\n", c.Name, c.Before)
		}
	}
	st := pl.Stats()
	rejected := ""
	if nRejected > 0 {
		// Dropped (counted by reason below) and answered (counted out).
		rejected = fmt.Sprintf(" (%d of them answers to packets rejected)", nRejected)
	}
	held := ""
	if n := w.HeldFragments(); n > 0 {
		held = fmt.Sprintf(", %d held (fragments whose first fragment did not come)", n)
	}
	fmt.Fprintf(&out, "summary: %d in, %d out%s, %d dropped%s; fast path %d, slow path %d\n", len(in), nOut, rejected, nDrop, held, st.Fast, st.Slow)
	var ports []string
	for _, p := range sw.Ports() {
		if outBy[p.Name] > 0 {
			ports = append(ports, fmt.Sprintf("%s=%d", p.Name, outBy[p.Name]))
		}
	}
	if len(ports) > 0 {
		fmt.Fprintf(&out, "  out by port: %s\n", strings.Join(ports, " "))
	}
	if d := pl.Drops.String(); d != "" {
		fmt.Fprintf(&out, "  drops by reason: %s\n", d)
	}
	if c := pl.Counters(); c.TooBigSent != 0 || c.Fragmented != 0 {
		fmt.Fprintf(&out, "  over an MTU: %d answered with ICMP fragmentation needed or packet too big, %d fragmented\n", c.TooBigSent, c.Fragmented)
	}
	fs := pl.FlowTable().Stats()
	fmt.Fprintf(&out, "  flow table: %d flows (inserted %d, expired %d, evicted %d, refused %d)\n",
		fs.Flows, fs.Inserted, fs.Expired, fs.Evicted, fs.Refused)
	// The rules that decided something, with their counters.
	for _, c := range sw.RuleCounters() {
		if c.Hits > 0 || c.Packets > 0 {
			port := c.Port
			if c.Shared {
				port = "(shared)" // one rule for every port that has its group
			}
			fmt.Fprintf(&out, "  rule %s %s %s %s: hits %d, packets %d, bytes %d\n", port, c.Layer, c.Group, c.Rule, c.Hits, c.Packets, c.Bytes)
		}
	}
	res.Trace = out.String()
	return res, nil
}
