package vswitch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/nat"
	"github.com/ufp-dev/ufp/rules"
	"github.com/ufp-dev/ufp/vfp"
)

// Switch is a virtual switch. It implements dataplane.SlowPath for its own
// pipeline. Policy is immutable and swapped atomically by Apply. Safe for
// concurrent use.
type Switch struct {
	pol atomic.Pointer[compiled]
	pl  *dataplane.Pipeline
	// env is what stateful actions keep across policies (NAT pools,
	// load-balancing state); policies are compiled against it.
	env *vfp.Env

	applyMu sync.Mutex // serialises Apply's Prepare and Install
	mu      sync.Mutex // serialises install
	ids     map[string]dataplane.PortID
	freeID  []dataplane.PortID
	nextID  dataplane.PortID
	gen     uint64

	epoch       time.Time // the flow table's clock starts here (monotonic)
	devMu       sync.Mutex
	devs        map[string]*attachment // by port name
	devGen      atomic.Uint64          // counts changes to devs: workers' transmit caches follow it
	serving     context.Context        // while Serve runs (guarded by devMu)
	workers     sync.WaitGroup
	devFailures atomic.Uint64
	txNoDevice  atomic.Uint64
	log         atomic.Pointer[slog.Logger]
	// noIncremental compiles every change whole (tests compare the
	// incremental paths with it).
	noIncremental bool
}

var _ dataplane.SlowPath = (*Switch)(nil)

// New returns a switch running policy cfg.
func New(cfg *Config) (*Switch, error) {
	env := vfp.NewEnv(nil)
	pol, err := cfg.compile(env)
	if err != nil {
		return nil, err
	}
	s := &Switch{ids: map[string]dataplane.PortID{}, epoch: time.Now(), env: env}
	pl, err := dataplane.NewPipeline(dataplane.PipelineConfig{FlowTable: pol.ftable, VXLANPort: pol.vxlan, VXLANZeroChecksum6: pol.zero6}, s)
	if err != nil {
		return nil, err
	}
	s.pl = pl
	if err := s.install(pol, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrRestartNeeded is wrapped by Apply's error when a policy changes a
// setting that only takes effect when the switch is created.
var ErrRestartNeeded = errors.New("the change needs a restart")

// Apply validates cfg and, if it is valid, makes it the running policy.
// Flows cached under the old policy are revalidated on their next packet.
// On error the running policy stays in place. cfg is the switch's from
// then on (Config returns it): the caller must not modify it.
func (s *Switch) Apply(cfg *Config) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	p, err := s.Prepare(cfg)
	if err != nil {
		return err
	}
	return s.Install(p)
}

// Prepared is a policy compiled for a switch by Prepare, to be installed
// by Install. Immutable.
type Prepared struct {
	pol  *compiled
	base *compiled // the running policy it was compiled against
}

// Ports returns the prepared policy's ports, in document order (IDs not
// yet given out), so that a daemon can prepare their devices before it
// installs the policy. Read only.
func (p *Prepared) Ports() []*Port { return p.pol.ports }

// Incremental reports whether the policy was compiled as a change of the
// running policy's load balancers' backends and remote endpoints alone:
// the ports, their layers and the other load balancers are the running
// policy's (docs/ARCHITECTURE.md, "Changes of backends"); or as such a
// change that adds or removes load balancers too, whose ports are the
// running policy's but for the layers with a load-balancers group and
// the host's vNIC ("Services added and removed"); or as a change of
// routes (with or without those), whose ports are the running policy's
// but for the layers a route is part of ("Changes of routes").
func (p *Prepared) Incremental() bool { return p.pol.incremental }

// Prepare validates cfg and compiles it against the switch, for Install;
// it changes nothing. A change of the running policy's load balancers'
// backends and remote endpoints alone (what a node agent sends most) is
// compiled incrementally: only the changed load balancers are lowered and
// compiled again.
func (s *Switch) Prepare(cfg *Config) (*Prepared, error) { return s.PrepareEdits(cfg, nil, nil) }

// PrepareEdits is Prepare for cfg made from base by ed (hns.Edits): if
// base is the running policy's document, the incremental compile compares
// only the objects ed names (hns.Lowered.UpdateEdits); else, or with ed
// nil, it is Prepare.
func (s *Switch) PrepareEdits(cfg, base *Config, ed *hns.Edits) (*Prepared, error) {
	cur := s.pol.Load()
	if base == nil || cur.cfg != base {
		ed = nil
	}
	if pol, ok := cfg.update(cur, s.env, ed); ok && !s.noIncremental {
		return &Prepared{pol: pol, base: cur}, nil
	}
	pol, err := cfg.compile(s.env)
	if err != nil {
		return nil, err
	}
	if pol.ftable != cur.ftable {
		return nil, fmt.Errorf("switch.flowTable: %w", ErrRestartNeeded)
	}
	if cmp.Or(pol.vxlan, dataplane.VXLANPort) != cmp.Or(cur.vxlan, dataplane.VXLANPort) { // 0 is 4789
		return nil, fmt.Errorf("switch.vxlanPort: %w", ErrRestartNeeded)
	}
	if pol.zero6 != cur.zero6 {
		return nil, fmt.Errorf("switch.vxlanZeroUDPChecksum6: %w", ErrRestartNeeded)
	}
	return &Prepared{pol: pol, base: cur}, nil
}

// Listed returns how many times the running policy's load balancers list
// endpoint name, if base is the running policy's HNS-level document (ok
// false: it is not, or not lowered by the switch).
func (s *Switch) Listed(base *Config, name string) (n int, ok bool) {
	cur := s.pol.Load()
	if cur.cfg != base || cur.lowered == nil {
		return 0, false
	}
	return cur.lowered.Listed(name), true
}

// ErrPolicyChanged is Install's error when the running policy changed
// after Prepare: prepare again.
var ErrPolicyChanged = errors.New("the running policy changed since the change was prepared")

// Install makes p, prepared against the running policy, the running
// policy. On error the running policy stays in place.
func (s *Switch) Install(p *Prepared) error { return s.install(p.pol, p.base) }

// install gives pol's ports stable IDs (a port keeps its ID while its name
// stays in the policy), publishes it, and forgets the flows of removed
// ports. An incremental policy has its running predecessor's ports and
// load balancers: it installs its changes of backends.
// It fails with ErrPolicyChanged unless base (if not nil) is running.
func (s *Switch) install(pol, base *compiled) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if base != nil && s.pol.Load() != base {
		return ErrPolicyChanged
	}
	if pol.incremental {
		if err := s.env.LB.PrepareChanges(pol.changes); err != nil {
			return err
		}
		cur := s.pol.Load()
		pol.byID = cur.byID
		if svc := pol.services; svc != nil {
			if err := s.env.LB.PrepareAdded(svc.added); err != nil {
				return err
			}
		}
		if pol.newPorts || pol.rerouted {
			// The ports keep their IDs; some are new values.
			pol.byID = slices.Clone(cur.byID)
			for _, p := range pol.ports {
				pol.byID[p.ID] = p
			}
		}
		s.env.LB.CommitChanges(pol.changes)
		if svc := pol.services; svc != nil {
			s.env.LB.CommitServices(pol.lbs, svc.added, svc.removed)
		}
		s.gen++
		pol.gen = s.gen
		s.pol.Store(pol)
		return nil
	}
	keep := map[string]bool{}
	need := 0
	for _, p := range pol.ports {
		keep[p.Name] = true
		if _, ok := s.ids[p.Name]; !ok {
			need++
		}
	}
	// IDs of ports removed now are free only after their flows are gone,
	// so they cannot serve this policy's new ports.
	if left := len(s.freeID) + int(dataplane.NoPort-s.nextID); need > left {
		return fmt.Errorf("ports: %d new ports, but only %d port IDs are free until the removed ports' flows are purged; apply in two steps", need, left)
	}
	if err := s.env.LB.Prepare(pol.lbs); err != nil {
		return err
	}
	if err := s.env.NAT.Configure(pol.pools); err != nil {
		return fmt.Errorf("switch.natPools: %w", err)
	}
	var removed []dataplane.PortID
	for name, id := range s.ids {
		if !keep[name] {
			removed = append(removed, id)
			delete(s.ids, name)
		}
	}
	maxID := dataplane.PortID(0)
	for _, p := range pol.ports {
		id, ok := s.ids[p.Name]
		if !ok {
			if n := len(s.freeID); n > 0 {
				id, s.freeID = s.freeID[n-1], s.freeID[:n-1]
				s.pl.ResetPort(id) // the new port counts from zero
			} else {
				id = s.nextID
				s.nextID++
			}
			s.ids[p.Name] = id
		}
		p.ID = id
		maxID = max(maxID, id)
	}
	pol.byID = make([]*Port, int(maxID)+1)
	for _, p := range pol.ports {
		pol.byID[p.ID] = p
	}
	s.env.LB.Commit(pol.lbs)
	s.gen++
	pol.gen = s.gen
	s.pol.Store(pol)
	if len(removed) > 0 {
		slices.Sort(removed) // reuse IDs in a reproducible order
		s.purge(removed)
		s.freeID = append(s.freeID, removed...)
	}
	return nil
}

// purge removes every flow that enters or leaves by one of the ports.
func (s *Switch) purge(ids []dataplane.PortID) {
	gone := map[dataplane.PortID]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	ft := s.pl.FlowTable()
	var doomed []*dataplane.Flow
	ft.Range(func(f *dataplane.Flow) bool {
		if gone[f.Key().InPort] || gone[f.Action().Out] {
			doomed = append(doomed, f)
		}
		return true
	})
	for _, f := range doomed {
		ft.RemoveConn(f)
	}
}

// NAT returns the switch's source NAT pools.
func (s *Switch) NAT() *nat.Table { return s.env.NAT }

// Pipeline returns the switch's packet pipeline.
func (s *Switch) Pipeline() *dataplane.Pipeline { return s.pl }

// Config returns the running policy document. The caller must not modify it.
func (s *Switch) Config() *Config { return s.pol.Load().cfg }

// Ports returns the running policy's ports in policy order.
func (s *Switch) Ports() []*Port { return s.pol.Load().ports }

// Port returns the port named name, or nil.
func (s *Switch) Port(name string) *Port { return s.pol.Load().byName[name] }

// PortByID returns the port with ID id, or nil.
func (s *Switch) PortByID(id dataplane.PortID) *Port { return s.pol.Load().port(id) }

func (pol *compiled) port(id dataplane.PortID) *Port {
	if int(id) < len(pol.byID) {
		return pol.byID[id]
	}
	return nil
}

// Decapsulates implements dataplane.SlowPath: the uplink terminates VXLAN.
func (s *Switch) Decapsulates(id dataplane.PortID) bool {
	p := s.pol.Load().port(id)
	return p != nil && p.Uplink
}

// Admit implements dataplane.SlowPath: the uplink's not-for-this-switch
// check (compiled.admit), for every frame that any worker processes:
// ufpd's, ufp-replay's, a benchmark's.
func (s *Switch) Admit(p *dataplane.Packet, tr *dataplane.Trace) dataplane.DropReason {
	pol := s.pol.Load()
	return pol.admit(pol.port(p.InPort), p.Bytes(), tr)
}

// admit reports whether frame, arrived by port in, is the switch's to
// handle: from the uplink, which reads its segment promiscuously, only
// broadcast and multicast and unicast for a MAC the switch owns (a
// port's, a gateway's) are; a frame between two other stations is
// DropNotForUs, so that no cached flow translates it. Frames from any
// other port, or too short to have a destination (the parser drops them),
// are admitted. Switch.Trace checks its packet with it too.
func (pol *compiled) admit(in *Port, frame []byte, tr *dataplane.Trace) dataplane.DropReason {
	if in == nil || !in.Uplink || len(frame) < 6 {
		return dataplane.NotDropped
	}
	// Most of what the uplink takes in is for the host's MAC, its own
	// (an owned MAC, checked first without the map).
	dst := dataplane.MAC(frame[:6])
	if dst == in.MAC || dst.IsMulticast() || pol.owned[dst] {
		return dataplane.NotDropped
	}
	if tr.On() {
		tr.Addf("port %s: dst %s is no MAC of this switch: not for us", in.Name, dst)
	}
	return dataplane.DropNotForUs
}

// Decide implements dataplane.SlowPath: the source port's layers outbound,
// the switching decision, the destination port's layers inbound. What a
// new connection's stateful actions hold (a source NAT binding, a
// backend) becomes d.State, which the pipeline keeps on the connection
// (and releases with it); a dropped decision keeps none. A connection
// being revalidated keeps the state it has.
func (s *Switch) Decide(v *dataplane.View, tr *dataplane.Trace, d *dataplane.Decision) {
	var x translation
	s.decide(v, tr, d, &x)
}

// translation is what the engine learns while it decides, beside what the
// Decision holds: whether a rule translated an address (the packet is then
// the host's own on the underlay, and may cross between an overlay port
// and the uplink), whether a rule made the connection stateful, and the
// rules that were their layers' verdicts (for counters).
type translation struct {
	pol      *compiled
	natted   bool
	stateful bool
	verdicts [maxMetered]*rules.Rule
	nv       int
	// rec, set only for a trace (Switch.Trace), makes the decision dry and
	// collects its steps.
	rec *traceRecorder
}

// decide makes the decision d for the packet v describes: the source
// port's layers, the switching decision, the destination port's layers.
func (s *Switch) decide(v *dataplane.View, tr *dataplane.Trace, d *dataplane.Decision, x *translation) {
	pol := s.pol.Load()
	d.Gen, x.pol = pol.gen, pol
	d.Begin(v, tr, x.rec != nil)
	defer x.finish(d)
	in := pol.port(v.InPort)
	if in == nil {
		tr.Addf("port %d is not in the policy", v.InPort)
		d.Drop = dataplane.DropUnknownPort
		return
	}
	if why := in.spoofed(v.SrcMAC, v.Src); why != "" {
		tr.Addf("port %s: %s", in.Name, why)
		d.Drop = dataplane.DropSpoofedSource
		return
	}
	tunneled := v.Encap
	if !s.crossLayers(in, rules.Out, x, d) {
		return
	}
	out := x.switchTo(in, tunneled, d)
	if out == nil || !s.crossLayers(out, rules.In, x, d) {
		return
	}
	if x.stateful && x.natted && !d.Revalidating && !tcpOpens(v) {
		// A translated connection would be opened by a segment that
		// cannot open one: Linux conntrack calls it invalid. Taken up,
		// a SYN-ACK a pod retransmits for a connection that left the
		// table (the half-open connections of a SYN flood at its
		// mapping) would be charged to the pod's share. What the
		// stateful actions bound is given back with the decision
		// (Decision.Keep). Not cached: a SYN on the key opens the
		// connection.
		if tr.On() {
			tr.Addf("stateful: tcp [%s] belongs to no connection and cannot open one: dropped", tcpFlags(v.TCPFlags))
		}
		d.Drop, d.NoCache = dataplane.DropTCPNoConnection, true
		return
	}
	if x.stateful && !x.natted && !d.Revalidating && !opens(v) {
		// Only a translation needs state for a packet that opens no
		// connection (a connection picked up mid-stream keeps its
		// mapping; tcpOpens says which TCP segments may). Allowed by
		// filtering alone, an answer (a SYN-ACK, a mid-stream segment,
		// an echo reply) opens no connection: its reply direction would
		// pass the layers unchecked, so a pod could open holes in its own
		// or a peer's ACLs by answering first. Its flow is cached
		// without state and the other direction is decided on its own.
		if tr.On() {
			tr.Addf("stateful: not a connection's first packet: no reply flow")
		}
		x.stateful = false
	}
	d.Out, d.HT, d.Stateful = out.ID, *d.Composite(), x.stateful
	d.MTU, d.ReplyMTU = out.MTU, in.MTU
	// Replies from the underlay may come from any router; a vNIC's
	// only from its own MAC.
	d.ReplyAnySrcMAC = out.Uplink
}

// finish ends the decision d: the meter of the rules it crossed, and the
// state its stateful actions hold, kept for the connection or released.
func (x *translation) finish(d *dataplane.Decision) {
	if x.nv > 0 && x.rec == nil {
		d.Meter = x.pol.meters.get(x.verdicts[:x.nv])
	}
	d.Keep()
}

// switchTo is the switching decision for a packet that entered by port in
// (tunneled: it was still encapsulated then) and crossed its layers: the
// port it leaves by, with the routing's transposition applied, or nil
// with d.Drop set.
func (x *translation) switchTo(in *Port, tunneled bool, d *dataplane.Decision) *Port {
	v, tr, pol := d.View(), d.Trace(), x.pol
	out, fwd, how := pol.forward(v)
	if d.Composite().Set&dataplane.FieldDstIP != 0 && !v.Encap {
		// A rule translated the destination: like a router after
		// destination NAT, the switch delivers the packet to the endpoint
		// that has the new address, whatever the frame was addressed to
		// and whichever segment it came from (the translation is the
		// host's, which reaches every segment).
		if p := pol.byIP[v.Dst]; p != nil && out != p {
			out, fwd, how = p, p.routedTo(), fwdTranslated
		}
	}
	var why string // what stops the packet; built only when tracing
	switch {
	case out == pol.uplink && out != nil && in.Underlay == Isolated && !v.Encap && !x.natted:
		if tr.On() {
			why = fmt.Sprintf("%s -> port %s is not on the underlay and %s is routed to no remote host: not sent", how.explain(v, out), in.Name, v.Dst)
		}
		d.Drop = dataplane.DropNoDestination
	case in.Uplink && out != nil && out.Underlay == Isolated && (!tunneled || v.Encap) && !x.natted:
		if tr.On() {
			why = fmt.Sprintf("%s -> port %s is reached only through the overlay: plain frames from the underlay are not delivered", how.explain(v, out), out.Name)
		}
		d.Drop = dataplane.DropNoDestination
	case out == nil:
		if tr.On() {
			why = how.explain(v, out)
		}
		d.Drop = dataplane.DropNoDestination
	case out == in && in.Uplink && !x.natted:
		// Nothing is switched back to the wire it came from.
		if tr.On() {
			why = "not sent back to the underlay it came from"
			if v.DstMAC == in.MAC && !v.Encap {
				why = "for the host itself, which has no port on this switch"
			}
			why = how.explain(v, out) + " -> " + why
		}
		d.Drop = dataplane.DropNoDestination
	case out == in && !x.natted:
		if tr.On() {
			why = fmt.Sprintf("%s -> back to port %s: hairpin not allowed", how.explain(v, out), in.Name)
		}
		d.Drop = dataplane.DropHairpin
	}
	if d.Drop != dataplane.NotDropped {
		if tr.On() {
			tr.Addf("switch: %s", why)
		}
		return nil
	}
	if tr.On() {
		tr.Addf("switch: %s -> port %s", how.explain(v, out), out.Name)
	}
	if !d.Transpose(&fwd) {
		return nil
	}
	return out
}

// opens reports whether the packet v describes can open a connection: a
// TCP SYN (without ACK, RST or FIN; not a later fragment), an ICMP or
// ICMPv6 echo request, or any packet of another protocol (UDP and others
// have no handshake to follow).
func opens(v *dataplane.View) bool {
	switch v.Proto {
	case dataplane.ProtoTCP:
		return v.TCPFlags&(dataplane.TCPSyn|dataplane.TCPAck|dataplane.TCPRst|dataplane.TCPFin) == dataplane.TCPSyn && !v.LaterFragment
	case dataplane.ProtoICMPv4:
		return v.ICMPType != dataplane.ICMPv4EchoReply
	case dataplane.ProtoICMPv6:
		return v.ICMPType != dataplane.ICMPv6EchoReply
	}
	return true
}

// tcpOpens reports whether the packet v describes may open a stateful,
// translated connection: anything but a TCP segment; a TCP SYN (without
// ACK, RST or FIN); and a bare ACK (without SYN, RST or FIN, with or
// without data), taken up mid-stream as Linux conntrack does with
// nf_conntrack_tcp_loose (its default). A connection the switch lost
// carries on by it where its NAT port is still free: one early-dropped
// under a flood between its SYN-ACK and its client's ACK, one idle past
// its timeout or evicted, one not yet in the journal when ufpd died. A
// SYN-ACK, a RST or a FIN never opens one (Linux: invalid). A later
// fragment has no TCP header to judge: it follows its first fragment.
func tcpOpens(v *dataplane.View) bool {
	if v.Proto != dataplane.ProtoTCP || v.LaterFragment {
		return true
	}
	switch v.TCPFlags & (dataplane.TCPSyn | dataplane.TCPAck | dataplane.TCPRst | dataplane.TCPFin) {
	case dataplane.TCPSyn, dataplane.TCPAck:
		return true
	}
	return false
}

// crossLayers runs the packet of decision d through port p's layers in
// direction dir, composing their transpositions into d. It reports false
// if the packet is dropped.
func (s *Switch) crossLayers(p *Port, dir rules.Direction, x *translation, d *dataplane.Decision) bool {
	v, tr := d.View(), d.Trace()
	n := len(p.Layers)
	for i := range n {
		l := p.Layers[i]
		if dir == rules.In {
			l = p.Layers[n-1-i]
		}
		var vd rules.Verdict
		if x.rec == nil {
			vd = l.Evaluate(v, dir)
		} else {
			vd = l.Explain(v, dir) // a trace counts no hit
			x.rec.layer(p, dir, l, &vd)
		}
		if tr.On() {
			// Guarded: boxing the arguments allocates even when tr is nil.
			tr.Addf("port %s %s: layer %s: %s", p.Name, dir, l.Name, vd)
		}
		if vd.Rule != nil && x.nv < maxMetered && !slices.Contains(x.verdicts[:x.nv], vd.Rule) {
			x.verdicts[x.nv] = vd.Rule
			x.nv++
		}
		if vd.Action.Verb == rules.Block {
			d.Drop = vd.Action.DropReason()
			return false
		}
		if !d.Transpose(&vd.Action.HT) {
			return false
		}
		if vd.Action.HT.Set&(dataplane.FieldSrcIP|dataplane.FieldDstIP) != 0 {
			x.natted = true
		}
		if sa := vd.Action.Translation; sa != nil {
			before := *d.Composite()
			if !sa.Translate(d, rules.Site{Uplink: p.Uplink, Host: p.Host}) {
				return false
			}
			// An action may leave the packet as it is (a connection
			// that reaches no NAT mapping).
			x.natted = x.natted || *d.Composite() != before
		}
		x.stateful = x.stateful || vd.Stateful()
	}
	return true
}

// spoofed returns why a vNIC may not send from these addresses, or "".
func (p *Port) spoofed(mac dataplane.MAC, ip netip.Addr) string {
	if p.Uplink {
		return ""
	}
	if mac != p.MAC {
		return fmt.Sprintf("source MAC %s is not the port's %s", mac, p.MAC)
	}
	// IPv6 link-local sources (fe80::/10) are every interface's own; IPv4
	// link-local (169.254/16) is not exempt.
	if ip.IsValid() && len(p.IPs) > 0 && !p.HasIP(ip) && !ip.IsUnspecified() && !(ip.Is6() && ip.IsLinkLocalUnicast()) {
		return fmt.Sprintf("source %s is not an address of the port", ip)
	}
	return ""
}

// forward is the switching decision for a packet: the port it leaves by and
// the transposition routing adds, or nil, and how it decided. The decision
// is made on the frame as it would be on the wire: while the packet is
// encapsulated, by its outer destination MAC. Frames for a known MAC go to
// its port; frames for the gateway MAC are routed to the endpoint that has
// the destination IP; unknown unicast goes to the uplink. Broadcast and
// multicast are not flooded.
func (pol *compiled) forward(v *dataplane.View) (*Port, dataplane.Transposition, forwarding) {
	var ht dataplane.Transposition
	dst := v.DstMAC
	if v.Encap {
		dst = v.OuterDstMAC
	}
	switch {
	case dst.IsMulticast():
		return nil, ht, fwdMulticast
	case pol.gwMACs[dst] != nil && !v.Encap:
		gw := pol.gwMACs[dst]
		// A gateway routes between the ports it serves, and from the
		// uplink (decapsulated traffic from remote hosts) to them.
		in := pol.port(v.InPort)
		if p := pol.byIP[v.Dst]; p != nil && gw.serves(p) && (gw.serves(in) || in != nil && in.Uplink) {
			ht.Set = dataplane.FieldSrcMAC | dataplane.FieldDstMAC
			ht.SrcMAC, ht.DstMAC = dst, p.MAC
			return p, ht, fwdRouted
		}
		if pol.uplink != nil {
			return pol.uplink, ht, fwdRoutedToUplink
		}
		return nil, ht, fwdRoutedNowhere
	}
	if p := pol.byMAC[dst]; p != nil && p.reaches(pol.port(v.InPort)) {
		return p, ht, fwdByMAC
	}
	if pol.uplink != nil {
		return pol.uplink, ht, fwdUnknownToUplink
	}
	return nil, ht, fwdUnknownNowhere
}

// forwarding says how forward decided. It is a constant so that the
// decision costs nothing when it is not traced; explain formats it.
type forwarding uint8

const (
	fwdMulticast forwarding = iota
	fwdRouted
	fwdRoutedToUplink
	fwdRoutedNowhere
	fwdByMAC
	fwdUnknownToUplink
	fwdUnknownNowhere
	fwdTranslated
)

// explain describes, for traces, how forward decided for the packet v
// describes (as forward saw it) to leave by out.
func (f forwarding) explain(v *dataplane.View, out *Port) string {
	dst, what := v.DstMAC, "dst"
	if v.Encap {
		dst, what = v.OuterDstMAC, "outer dst"
	}
	switch f {
	case fwdMulticast:
		return fmt.Sprintf("%s %s is broadcast or multicast: not flooded", what, dst)
	case fwdRouted:
		return fmt.Sprintf("routed by gateway: %s is at %s", v.Dst, out.MAC)
	case fwdRoutedToUplink:
		return fmt.Sprintf("routed by gateway: %s is not local", v.Dst)
	case fwdRoutedNowhere:
		return fmt.Sprintf("routed by gateway: %s is not local and there is no uplink", v.Dst)
	case fwdByMAC:
		return fmt.Sprintf("%s %s", what, dst)
	case fwdUnknownToUplink:
		return fmt.Sprintf("%s %s unknown: to the uplink", what, dst)
	case fwdTranslated:
		return fmt.Sprintf("translated to %s: at %s", v.Dst, out.MAC)
	}
	return fmt.Sprintf("%s %s unknown and there is no uplink", what, dst)
}

// routedTo is the transposition of a frame routed to p: to p's MAC, from
// the gateway p sends to (its link's), if p has one.
func (p *Port) routedTo() dataplane.Transposition {
	ht := dataplane.Transposition{Set: dataplane.FieldDstMAC, DstMAC: p.MAC}
	if gw := p.Link.GatewayMAC; !gw.IsZero() {
		ht.Set |= dataplane.FieldSrcMAC
		ht.SrcMAC = gw
	}
	return ht
}

// resolve returns the MAC that answers for ip (an endpoint's, or a gateway
// that serves port asker) and the port it is on (nil for a gateway).
func (pol *compiled) resolve(ip netip.Addr, asker *Port) (dataplane.MAC, *Port, bool) {
	if p := pol.byIP[ip]; p != nil && p.reaches(asker) {
		return p.MAC, p, true
	}
	if gw := pol.gwIPs[ip]; gw != nil && (gw.serves(asker) || asker.Uplink) {
		return gw.mac, nil, true
	}
	return dataplane.MAC{}, nil, false
}

// Generation returns the running policy's generation number; it
// implements dataplane.SlowPath.
func (s *Switch) Generation() uint64 { return s.pol.Load().gen }
