package vswitch

import (
	"sync"

	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/rules"
)

// maxMetered bounds the rules a flow's traffic is credited to: the
// verdicts of the first layers it crossed (a packet crosses the layers of
// two ports; past this many rule verdicts the rest go uncounted).
const maxMetered = 8

// ruleMeter credits the rules that decided a flow (each layer's verdict,
// in order) with the flow's packets and bytes when it leaves the table.
type ruleMeter struct {
	rules []*rules.Rule
}

// Retire implements dataplane.Meter.
func (m *ruleMeter) Retire(packets, bytes uint64) {
	for _, r := range m.rules {
		c := r.Counters()
		c.Packets.Add(packets)
		c.Bytes.Add(bytes)
	}
}

// meterSet interns a policy's meters: one per combination of verdicts, so
// that flows decided alike share their actions. Safe for concurrent use.
type meterSet struct {
	mu sync.Mutex
	m  map[[maxMetered]*rules.Rule]*ruleMeter
}

func (ms *meterSet) get(rs []*rules.Rule) *ruleMeter {
	var k [maxMetered]*rules.Rule
	copy(k[:], rs)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m := ms.m[k]; m != nil {
		return m
	}
	if ms.m == nil {
		ms.m = map[[maxMetered]*rules.Rule]*ruleMeter{}
	}
	m := &ruleMeter{rules: append([]*rules.Rule(nil), rs...)}
	ms.m[k] = m
	return m
}

// RuleCounters returns the counters of every rule of the running policy,
// in policy order (ports, their layers, groups, rules). They count from
// the Apply that compiled the policy's rules (a change of load balancers'
// backends alone keeps the rules, and so their counts: Prepare); a flow
// decided under an older policy counts for the new one's rules once it is
// revalidated. A rule of a shared group (vfp's switch.sharedGroups) is
// one rule whichever ports' layers have it: it is listed once, where it
// first is, with no port, Shared set and the shared group's name, and it
// counts the traffic of every port that has it. The live
// flows' part is the flow table's sums by meter (MeterTraffic): a call
// does not walk the table.
func (s *Switch) RuleCounters() []inspect.RuleCount {
	pol := s.pol.Load()
	live := liveTraffic(s.pl.FlowTable())
	var out []inspect.RuleCount
	seen := map[*rules.Shared]bool{}
	for _, p := range pol.ports {
		for _, l := range p.Layers {
			for gi := range l.Groups {
				g := &l.Groups[gi]
				port, group := p.Name, g.Name
				if sh := g.Shared; sh != nil {
					// One rule for every port that has it: listed once,
					// where it is first, under the shared group's name.
					if seen[sh] {
						continue
					}
					seen[sh] = true
					port, group = "", sh.Name()
				}
				for ri := range g.Rules {
					r := &g.Rules[ri]
					c := r.Counters()
					t := live[r]
					out = append(out, inspect.RuleCount{Port: port, Layer: l.Name, Group: group, Rule: r.Name, Shared: g.Shared != nil,
						Hits: c.Hits.Load(), Packets: c.Packets.Load() + t[0], Bytes: c.Bytes.Load() + t[1]})
				}
			}
		}
	}
	return out
}
