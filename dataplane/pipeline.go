package dataplane

import (
	"encoding/binary"
	"runtime"
	"strconv"
	"sync"
)

// SlowPath is the switch as the pipeline sees it: the check every frame
// passes first, and what the pipeline calls when the flow table cannot
// answer (the switch's layers and forwarding tables). Implementations are
// safe for concurrent use by several workers.
type SlowPath interface {
	// Admit reports whether frame p, arrived on p.InPort, is the
	// switch's to handle (NotDropped) or why not: a port that reads its
	// segment promiscuously (the uplink) also sees unicast frames
	// between other stations. Every frame is checked before it is parsed
	// and before the flow table is looked at, so that no cached flow
	// translates a frame that is not the switch's. It records why it
	// refuses a frame in tr.
	Admit(p *Packet, tr *Trace) DropReason
	// Decapsulates reports whether VXLAN packets arriving on port are
	// tunnel traffic the switch terminates (the uplink); elsewhere they
	// are plain UDP.
	Decapsulates(port PortID) bool
	// Generation returns the current policy generation. Cached decisions
	// of an older generation are revalidated on their next packet.
	Generation() uint64
	// Local handles a frame that is not a cacheable IP flow: ARP, IPv6
	// neighbour discovery, other EtherTypes. It answers in place (rewrites
	// p and sets p.OutPort) or sets p.Drop.
	Local(p *Packet, pr *Parsed, tr *Trace)
	// Decide runs the layers on the packet v describes (the first packet
	// of a flow, or the origin of a connection being revalidated) and
	// fills d. It leaves v as the packet will leave the switch. d.State
	// holds the connection's state when revalidating, nil otherwise.
	Decide(v *View, tr *Trace, d *Decision)
}

// Decision is the slow path's verdict for a flow.
type Decision struct {
	Out  PortID
	Drop DropReason
	HT   Transposition
	// NoCache: apply the decision to this packet only.
	NoCache bool
	// Stateful: install the reply direction too, with the reverse of HT,
	// so that replies are handled without crossing the layers.
	Stateful bool
	// State is connection state for stateful actions, kept on the Conn.
	State any
	// Revalidating: the pipeline is re-deciding an established
	// connection from its origin, or deciding a packet of the origin's
	// direction on its own (State holds the connection's state). A
	// decision dropped as DropRevalidated ends the connection.
	Revalidating bool
	// Gen is the policy generation the decision was made under (0: the
	// generation the pipeline read at the start of the batch, which the
	// pipeline then fills in).
	Gen uint64
	// ReplyAnySrcMAC: replies may come from any source MAC (they arrive
	// on a port that does not check senders, such as the uplink, where
	// another router may answer); otherwise only from the MAC the packet
	// went to.
	ReplyAnySrcMAC bool
	// Reject: the packet is dropped (Drop says why), and its sender is
	// answered as Reject does (a TCP RST, an ICMP unreachable) where an
	// answer is due.
	Reject bool
	// Now is the pipeline's clock when the decision is made.
	Now int64
	// Meter, if set, is credited with the packets and bytes of the flows
	// the decision installs (both directions of a connection), when they
	// leave the table (Action.Meter).
	Meter Meter
	// MTU is the largest IP packet the output port takes (0: no limit);
	// ReplyMTU is the input port's, for the reply direction of a
	// stateful decision. Larger packets are fragmented or answered
	// (mtu.go).
	MTU, ReplyMTU uint16
	// Own: HT writes a value of the connection's own, a source port its
	// NAT binding (or its load balancer) gave it. The pipeline keeps such
	// actions apart from the others (Pipeline.action), which they would
	// otherwise crowd out of the bounded table of shared actions, one
	// per binding. The reply direction's action is the connection's own
	// too when it gives the packet back the source port (ReverseHT sets
	// DstPort).
	Own bool

	// The working state that stateful actions share while the slow path
	// decides: see decide.go. Reset with the rest.
	work decisionWork
}

// PipelineConfig configures a Pipeline.
type PipelineConfig struct {
	FlowTable FlowTableConfig
	// Fragments bounds each worker's tracking of fragmented datagrams
	// (fragtrack.go); the zero value takes the defaults.
	Fragments FragmentConfig
	// VXLANPort is the UDP port decoded as VXLAN; 0 means 4789.
	VXLANPort uint16
	// VXLANZeroChecksum6 accepts VXLAN over IPv6 with a zero UDP
	// checksum (RFC 6935); by default it is dropped (CheckTunnel).
	VXLANZeroChecksum6 bool
	// ICMPRate and ICMPBurst bound the ICMP errors each worker sends,
	// about packets over an MTU (mtu.go) and refusing packets (reject):
	// a token bucket of ICMPBurst errors refilled at ICMPRate a second.
	// Zero means DefaultICMPRate and DefaultICMPBurst; a negative
	// ICMPRate, no limit.
	ICMPRate, ICMPBurst int
}

// Pipeline runs packets through the unified flow table and, on a miss, the
// slow path. It is shared by workers; each worker uses its own Worker.
// Safe for concurrent use.
//
// Each worker counts its own packets (by path, and per port: received,
// sent, dropped by reason), so that no two workers write one counter; the
// pipeline keeps a registry of its workers and sums them on read
// (Counters, Stats, Drops). A released worker's counts stay in the sums.
type Pipeline struct {
	slow      SlowPath
	uft       *FlowTable
	vxlanPort uint16
	zero6     bool // VXLANZeroChecksum6
	// errSrc is slow as an ErrorSourcer, nil if it is not one.
	errSrc              ErrorSourcer
	icmpRate, icmpBurst int
	frag                FragmentConfig

	// Drops reads the drops by reason, summed over the workers, and
	// counts drops outside them (DropTotals.Add).
	Drops DropTotals
	reg   counterRegistry

	mu      sync.Mutex
	actGen  uint64
	actions map[actionKey]*Action
	// owns holds actions of connections' own (Decision.Own); nil until
	// the first.
	owns *[ownSlots]ownSlot
	// pushes holds the compiled header sets of the actions' pushes, by
	// value, shared by every action that pushes one (guarded by mu).
	pushes map[Outer]*pushHeaders
}

// actionKey identifies a decision; the pushed outer header set is keyed by
// value, so that equal pushes built separately (the reverse of every
// stateful connection from one remote host) share an Action.
type actionKey struct {
	out   PortID
	mtu   uint16
	drop  DropReason
	ht    Transposition // with Push cleared
	outer Outer
	push  bool
	meter Meter
}

// maxInterned bounds the table of shared actions; beyond it, flows get
// actions of their own.
const maxInterned = 1 << 16

// NewPipeline returns a pipeline over slow path s.
func NewPipeline(cfg PipelineConfig, s SlowPath) (*Pipeline, error) {
	frag, err := cfg.Fragments.withDefaults()
	if err != nil {
		return nil, err
	}
	uft, err := NewFlowTable(cfg.FlowTable)
	if err != nil {
		return nil, err
	}
	pl := &Pipeline{slow: s, uft: uft, vxlanPort: cfg.VXLANPort, frag: frag, zero6: cfg.VXLANZeroChecksum6, actions: make(map[actionKey]*Action),
		icmpRate: cfg.ICMPRate, icmpBurst: cfg.ICMPBurst}
	pl.errSrc, _ = s.(ErrorSourcer)
	pl.Drops.pl = pl
	return pl, nil
}

// FlowTable returns the pipeline's flow table.
func (pl *Pipeline) FlowTable() *FlowTable { return pl.uft }

// PipelineStats counts packets by path.
type PipelineStats struct{ Fast, Slow uint64 }

// actionSpec is what an Action is compiled from: the output port and its
// MTU, or the drop reason; the transposition; the policy generation it is
// of; the meter of the flows that use it.
type actionSpec struct {
	out   PortID
	mtu   uint16
	drop  DropReason
	ht    Transposition
	gen   uint64
	meter Meter
}

// spec returns what the action of decision d is compiled from.
func (d *Decision) spec() actionSpec {
	return actionSpec{out: d.Out, mtu: d.MTU, drop: d.Drop, ht: d.HT, gen: d.Gen, meter: d.Meter}
}

// action returns the shared action for s. An action of a connection's own
// (own, Decision.Own: it writes the connection's ports) is shared too,
// with the connections that have the same ports, but kept apart from the
// others, in a table keyed by the action without its ports (itself
// shared) and the ports: that key is small, the table can be bounded on
// its own, and such actions, one per NAT binding, do not crowd the others
// out of theirs.
func (pl *Pipeline) action(s *actionSpec, own bool) (*Action, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if s.gen > pl.actGen {
		clear(pl.actions)
		pl.owns = nil
		pl.actGen = s.gen
	} else if s.gen < pl.actGen {
		// A worker still deciding under an older policy: its actions
		// are not shared.
		return newMeteredAction(s, nil)
	}
	if !own || s.drop != NotDropped {
		return pl.sharedLocked(s)
	}
	const ports = FieldSrcPort | FieldDstPort | fieldEchoIDDst
	bs := *s
	bs.ht.Set &^= ports
	bs.ht.SrcPort, bs.ht.DstPort = 0, 0
	base, err := pl.sharedLocked(&bs)
	if err != nil {
		return nil, err
	}
	ht := &s.ht
	k := ownKey{base: base, ports: ht.Set & ports}
	if k.ports&FieldSrcPort != 0 {
		k.sport = ht.SrcPort
	}
	if k.ports&FieldDstPort != 0 {
		k.dport = ht.DstPort
	}
	if pl.owns == nil {
		pl.owns = new([ownSlots]ownSlot)
	}
	slot := &pl.owns[k.slot()]
	if slot.a != nil && slot.k == k {
		return slot.a, nil
	}
	a, err := newMeteredAction(s, base.pushed)
	if err != nil {
		return nil, err
	}
	*slot = ownSlot{k: k, a: a}
	return a, nil
}

// ownKey identifies an action of a connection's own: the action without
// the ports (shared) and the ports.
type ownKey struct {
	base         *Action
	ports        Fields
	sport, dport uint16
}

// slot returns k's slot in the table of actions of connections' own: a
// mix of the ports and the base action's addresses.
func (k *ownKey) slot() uint64 {
	x := (uint64(k.sport) | uint64(k.dport)<<16 | uint64(k.ports)<<32 | uint64(k.base.Out)<<40) * 0x9e3779b97f4a7c15
	x ^= (uint64(k.base.src4) | uint64(k.base.dst4)<<32) * 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return x & (ownSlots - 1)
}

// ownSlots is the size of the table of actions of connections' own, a
// power of two. The table is direct-mapped, a cache rather than a map: a
// binding's port may serve many connections (endpoint-independent
// mapping), and many pods' connections may have the port, but its
// entries are not worth a map's probes and growth to keep them all.
const ownSlots = 1 << 16

// ownSlot is an entry of the table of actions of connections' own.
type ownSlot struct {
	k ownKey
	a *Action
}

// sharedLocked returns the shared action for s, of the pipeline's
// generation; pl.mu is held.
func (pl *Pipeline) sharedLocked(s *actionSpec) (*Action, error) {
	k := actionKey{out: s.out, mtu: s.mtu, drop: s.drop, ht: s.ht, meter: s.meter}
	if s.ht.Push != nil {
		k.ht.Push, k.outer, k.push = nil, *s.ht.Push, true
	}
	if a := pl.actions[k]; a != nil {
		return a, nil
	}
	var push *pushHeaders
	if s.ht.Push != nil && s.drop == NotDropped {
		push = pl.pushHeaders(s.ht.Push)
	}
	a, err := newMeteredAction(s, push)
	if err != nil {
		return nil, err
	}
	if len(pl.actions) < maxInterned {
		pl.actions[k] = a
	}
	return a, nil
}

// pushHeaders returns the compiled header set o, shared by the actions
// that push it; nil if o is not valid (newAction then reports why). pl.mu
// is held. The table is bounded as the actions' is, and forgotten whole
// when full.
func (pl *Pipeline) pushHeaders(o *Outer) *pushHeaders {
	if ph := pl.pushes[*o]; ph != nil {
		return ph
	}
	if o.Validate() != nil {
		return nil
	}
	if pl.pushes == nil || len(pl.pushes) >= maxInterned {
		pl.pushes = make(map[Outer]*pushHeaders)
	}
	ph := newPushHeaders(o)
	pl.pushes[*o] = ph
	return ph
}

// Worker processes batches for one goroutine. Its scratch space is reused
// from packet to packet, and it owns its counters (the pipeline sums them:
// Pipeline.Counters). Not safe for concurrent use; Release it when done.
type Worker struct {
	pl     *Pipeline
	parsed Parsed
	key    FlowKey
	// emc is the worker's exact-match cache: recently used flows by hash,
	// checked without locks before the shared flow table.
	emc  *[emcSize]*Flow
	view View
	orig View
	dec  Decision
	fast uint64
	slow uint64

	// A run of fast-path packets of one flow, counted on the flow in one
	// go when the run ends (another flow, a slow-path packet, the batch's
	// end), so that a burst costs one atomic add per counter.
	run      *Flow
	runPkts  uint64
	runBytes uint64
	runNow   int64

	// Trace, when non-nil, records each slow-path packet's way; the caller
	// resets it between packets.
	Trace *Trace
	// Flow is the flow the last packet used (nil if none), for tracing.
	Flow  *Flow
	quote Quote
	// icmp rate-limits the ICMP errors the worker sends (mtu.go).
	icmp tokenBucket

	// ctr are the worker's counters, published to the pipeline's
	// readers; ports is the worker's own view of ctr.ports. A run of
	// packets received on one port is counted in one go (rxPort,
	// rxPkts, rxBytes).
	ctr     *workerCounters
	ports   []*portCells
	cleanup runtime.Cleanup
	rxPort  PortID
	rxPkts  uint64
	rxBytes uint64

	// frags tracks fragmented datagrams (fragtrack.go); nil until the
	// worker sees its first fragment. fragFirst is the entry (plus one)
	// of the first fragment being processed, whose verdict fragDecided
	// records; 0 if none.
	frags     *fragTable
	fragFirst int32
	// applied and appliedHash are the action the slow path applied to
	// its packet and the flow hash it applied it with (apply); applied
	// is nil if it applied none.
	applied     *Action
	appliedHash uint32
}

// emcSize is the number of entries of a worker's exact-match cache (a power
// of two): 64 KiB of flow pointers.
const emcSize = 8192

// NewWorker returns a worker of pl.
func (pl *Pipeline) NewWorker() *Worker {
	w := &Worker{pl: pl, emc: new([emcSize]*Flow), icmp: newTokenBucket(pl.icmpRate, pl.icmpBurst)}
	w.parsed.VXLANPort = pl.vxlanPort
	pl.register(w)
	return w
}

// Process runs a batch of packets, each arrived on its InPort, at time now
// (nanoseconds on the caller's clock). On return every packet has OutPort
// set, or Drop set and OutPort == NoPort, but for a later IP fragment that
// came before its first fragment: it is held (Path PathHeld, neither sent
// nor dropped; the worker keeps a copy), and comes out of a later batch's
// Released. Each packet is counted as received on its InPort, at the
// length it arrived with. A packet the slow path does not admit
// (SlowPath.Admit) is dropped before anything else looks at it, on neither
// path.
func (w *Worker) Process(pkts []*Packet, now int64) {
	gen := w.pl.slow.Generation()
	w.icmp.refill(now)
	if w.frags != nil {
		w.fragBatch(now)
	}
	for _, p := range pkts {
		w.countRx(p.InPort, p.Len())
		w.process(p, gen, now)
	}
	w.endRun()
	w.flushRx()
	if w.fast != 0 {
		w.ctr.fast.Add(w.fast)
	}
	if w.slow != 0 {
		w.ctr.slow.Add(w.slow)
	}
	w.fast, w.slow = 0, 0
}

// drop drops p for reason r, counted against its input port.
func (w *Worker) drop(p *Packet, r DropReason) {
	p.Drop, p.OutPort = r, NoPort
	w.countDrop(p.InPort, r)
}

func (w *Worker) countDrop(in PortID, r DropReason) {
	if r < numDropReasons {
		w.cell(in).drops[r].Add(1)
	}
}

// process runs packet p, of a batch that started under policy generation
// gen: it drops p if the switch does not admit it (SlowPath.Admit: a frame
// on the uplink for another station), decodes it, hands frames that are
// not IP flows to the switch
// (SlowPath.Local), looks p's flow up (the worker's exact-match cache, then
// the flow table) and applies its action (the fast path), or hands p to
// the slow path.
func (w *Worker) process(p *Packet, gen uint64, now int64) {
	p.OutPort, p.Drop, p.Path, p.Rejected, p.Frag = NoPort, NotDropped, PathNone, NotDropped, Fragmentation{}
	w.Flow = nil
	if r := w.pl.slow.Admit(p, w.Trace); r != NotDropped {
		w.drop(p, r) // on no path: neither fast nor slow
		return
	}
	pr := &w.parsed
	b := p.Bytes()
	// Untagged IPv4 (the EtherType, checked here so that other frames pay
	// nothing for it) is decoded by decodeCommon where it can.
	if len(b) < EthernetLen || binary.BigEndian.Uint16(b[ethType:]) != EtherTypeIPv4 || !pr.decodeCommon(b) {
		if r := pr.Decode(b); r != NotDropped && !w.decodePlain(p) {
			w.fragRefused(p, pr, r, now) // a first fragment's later ones go too
			w.drop(p, r)
			return
		}
	}
	if pr.Encap && !w.tunnel(p, b, pr) {
		return
	}
	h := pr.Tenant()
	if h.IPVersion == 0 || isNeighborDiscovery(h) {
		p.Path = PathSlow
		w.slow++
		w.pl.slow.Local(p, pr, w.Trace)
		if p.Drop != NotDropped {
			w.drop(p, p.Drop)
		}
		return
	}
	// ICMP errors are never cached: each may belong to another
	// connection, and is translated as that connection's replies are
	// (RFC 5508 section 4), or decided on its own.
	icmpErr := (h.Proto == ProtoICMPv4 || h.Proto == ProtoICMPv6) && IsICMPError(h)
	key := &w.key
	pr.KeyInto(key, p.InPort)
	hash := key.Hash()
	var outer *Headers
	if pr.Encap {
		outer = &pr.Outer
	}
	uft := w.pl.uft
	var f *Flow
	if !icmpErr {
		slot := &w.emc[hash&(emcSize-1)]
		f = *slot
		if f == nil || f.hash != hash || !f.key.Equal(key) || f.Removed() {
			if f = uft.Lookup(key, hash); f != nil {
				*slot = f
			}
		}
	}
	if f != nil {
		a := f.action.Load()
		if a.Gen >= gen && f.guardOK(b[h.Eth:], outer) && !uft.Expired(f, now) && !restarts(f, h.TCPFlags) {
			if h.Flags&FlagFragment != 0 {
				w.fragFast(p, b, pr, f, hash, now) // a first fragment
				return
			}
			w.applyTo(p, b, pr, a, hash)
			w.account(f, len(b), h.TCPFlags, now)
			p.Path = PathFast
			w.Flow = f
			w.fast++
			return
		}
	}
	// A later fragment follows its first fragment, or waits for it.
	if h.Flags&FlagFragment != 0 && w.fragment(p, b, pr, now) {
		return
	}
	p.Path = PathSlow
	w.slow++
	w.endRun()
	sp := slowPacket{p: p, key: key, hash: hash, gen: gen, now: now, icmpErr: icmpErr, flow: f}
	eth := Ethernet(b[h.Eth:])
	sp.src, sp.dst = eth.Src(), eth.Dst()
	if outer != nil {
		sp.outerSrc, sp.outerDst = outer.Src, outer.Dst
	}
	w.slowPath(&sp)
}

// tunnel takes the VXLAN packet p (frame b, decoded into pr) as plain UDP
// on a port that does not terminate tunnels (pr.Encap cleared), and on
// one that does checks its outer headers (CheckTunnel) before anything
// reads the inner frame. It reports false if it dropped p.
func (w *Worker) tunnel(p *Packet, b []byte, pr *Parsed) bool {
	if !w.pl.slow.Decapsulates(p.InPort) {
		pr.Encap = false
		return true
	}
	if r := CheckTunnel(b, pr, &p.Offload, w.pl.zero6); r != NotDropped {
		w.drop(p, r)
		return false
	}
	return true
}

// decodePlain decodes p, which failed to decode, again without VXLAN
// decoding if it arrived on a port that does not decapsulate: there a
// datagram to the VXLAN port is plain UDP whatever its payload holds (see
// SlowPath.Decapsulates). It reports whether p decodes so. Only frames that
// fail pay for the second decode and the Decapsulates call.
func (w *Worker) decodePlain(p *Packet) bool {
	if w.pl.slow.Decapsulates(p.InPort) {
		return false
	}
	pr := &w.parsed
	pr.NoVXLAN = true
	r := pr.Decode(p.Bytes())
	pr.NoVXLAN = false
	return r == NotDropped
}

// account counts a fast-path packet of n bytes on f, batched into runs.
// Packets with SYN, FIN or RST change the connection's state and are
// counted at once, and so is a direction's first ACK: it completes the
// handshake (see handshaken).
func (w *Worker) account(f *Flow, n int, tcp uint8, now int64) {
	if f != w.run {
		w.endRun()
		w.run = f
	}
	w.runPkts++
	w.runBytes += uint64(n)
	w.runNow = now
	if tcp&(TCPSyn|TCPFin|TCPRst) != 0 || tcp&TCPAck != 0 && uint8(f.state.Load())&TCPAck == 0 {
		w.pl.uft.Account(f, 0, tcp, now)
	}
}

// endRun counts the current run on its flow.
func (w *Worker) endRun() {
	if f := w.run; f != nil {
		first := f.packets.Add(w.runPkts) == w.runPkts
		f.bytes.Add(w.runBytes)
		if f.lastSeen.Load() < w.runNow {
			f.lastSeen.Store(w.runNow)
		}
		if first {
			w.pl.uft.touch(f) // replied now, perhaps
		}
		w.pl.uft.changed(f.hash)
		w.run, w.runPkts, w.runBytes = nil, 0, 0
	}
}

// restarts reports whether a TCP SYN reuses the key of a connection that
// was closed (FIN or RST seen): it starts a new connection.
func restarts(f *Flow, tcp uint8) bool {
	if tcp&(TCPSyn|TCPAck) != TCPSyn {
		return false
	}
	s := uint8(f.state.Load())
	if c := f.conn.Load(); c != nil {
		if o := c.Other(f); o != nil {
			s |= uint8(o.state.Load())
		}
	}
	return s&(TCPFin|TCPRst) != 0
}

func isNeighborDiscovery(h *Headers) bool {
	if h.Proto != ProtoICMPv6 || h.Flags&FlagL4 == 0 {
		return false
	}
	t := uint8(h.DstPort >> 8)
	return t >= 133 && t <= 137
}

// apply applies action a to the slow path's packet sp.p, with flow hash
// hash, and records them in w.applied and w.appliedHash (what a first
// fragment's later fragments follow: fragDecided). They are worker fields
// rather than slowPacket's: every packet's frame zeroes a slowPacket, and
// the fast path would pay for two more fields.
func (w *Worker) apply(sp *slowPacket, a *Action, hash uint32) {
	w.applied, w.appliedHash = a, hash
	w.applyTo(sp.p, sp.p.Bytes(), &w.parsed, a, hash)
}

// applyTo is apply where b is p's frame, p.Bytes().
func (w *Worker) applyTo(p *Packet, b []byte, pr *Parsed, a *Action, hash uint32) {
	if a.Drop != NotDropped {
		w.drop(p, a.Drop)
		return
	}
	// Measured before the transposition, which a packet too large is
	// answered without (mtu.go).
	var c MTUCheck
	if a.MTU != 0 && (p.Offload.GSOType != GSONone || a.mayExceed(len(b))) {
		if c = a.checkMTU(p, b, pr); c.Verdict >= MTUAnswer {
			w.overMTU(p, pr, a, &c)
			return
		}
	}
	if r := a.apply(p, b, pr, hash); r != NotDropped {
		w.drop(p, r)
		return
	}
	if c.Verdict == MTUFragment {
		w.fragmentAt(p, &c)
	}
	p.OutPort = a.Out
}

// slowPacket is a packet on the slow path: what the pipeline knows of it
// beyond its bytes and its parse (Worker.parsed). process fills it in; the
// stages of the slow path read it, and triage records in it what the
// decision is for.
type slowPacket struct {
	p    *Packet
	key  *FlowKey
	hash uint32 // key.Hash()
	// gen is the policy generation the batch started with, then the one
	// the packet was decided under (Decision.Gen).
	gen uint64
	now int64
	// The fields a flow's guard holds: the packet's MACs and, if it is
	// encapsulated, its outer source and destination addresses (zero if
	// not).
	src, dst           MAC
	outerSrc, outerDst [16]byte
	// icmpErr: the packet is an ICMP error, never cached: it is
	// translated as the replies of the connection it quotes a packet of
	// are (related), or decided on its own.
	icmpErr bool

	// flow is the table's flow for the key that the fast path could not
	// use; after triage, a stale stateless flow whose action the decision
	// replaces, or nil for a new flow.
	flow *Flow
	// alone: the packet is decided on its own and the flow stays (triage).
	alone bool
	// held is the stateful connection a packet decided alone opens, if
	// any: its state (backend, NAT mapping) holds for the packet as for
	// the connection's own packets.
	held *Conn
}

// slowPath handles a packet the fast path could not (slowDecide); a
// first fragment then leaves its verdict for its later fragments
// (fragDecided).
func (w *Worker) slowPath(sp *slowPacket) {
	w.applied = nil
	w.slowDecide(sp)
	if w.fragFirst != 0 {
		w.fragDecided(sp.p, w.applied, w.appliedHash, sp.now)
	}
}

// slowDecide handles a packet the fast path could not. An ICMP error
// related to a stateful connection is translated as the connection's
// replies are. Any other packet has what the table holds for its key
// sorted out (triage), is decided by the layers (decide), and has its
// decision carried out (commit: installed and applied).
func (w *Worker) slowDecide(sp *slowPacket) {
	if sp.icmpErr && w.related(sp) {
		return
	}
	if sp.flow != nil && w.triage(sp) {
		return
	}
	d := w.decide(sp)
	if sp.held != nil && d.Drop == DropRevalidated {
		// The held connection's state no longer holds: the connection
		// ends, and the packet, unless end answered it, is decided again
		// as the first of a new one.
		settle(d.State, sp.held)
		if w.end(sp.p, sp.held) {
			return
		}
		sp.flow, sp.alone, sp.held = nil, false, nil
		d = w.decide(sp)
	}
	// State the decision allocated is given back unless a connection
	// took it.
	settle(d.State, w.commit(sp, d))
}

// triage sorts out sp.flow (not nil), the flow the table holds for the
// packet's key that the fast path could not use, and reports whether that
// handled the packet (a revalidated connection's). Otherwise it leaves in
// sp what the decision is for: sp.flow, a stale stateless flow whose
// action the decision replaces, or nil for a new flow; or sp.alone (and
// sp.held) for a packet decided on its own while its flow stays.
func (w *Worker) triage(sp *slowPacket) bool {
	f := sp.flow
	uft := w.pl.uft
	switch {
	case uft.Expired(f, sp.now) || restarts(f, w.parsed.Tenant().TCPFlags):
		w.Trace.Addf("flow %s expired or closed: removed", f.key)
		uft.RemoveConn(f)
		sp.flow = nil
	case f.action.Load().Gen < sp.gen && f.GuardMatches(sp.src, sp.dst, &sp.outerSrc, &sp.outerDst):
		if c := f.conn.Load(); c != nil && c.Stateful {
			if w.revalidate(sp, f, c) {
				return true
			}
			sp.flow = nil
		} else if w.Trace.On() {
			w.Trace.Addf("revalidate flow %s (generation %d -> %d)", f.key, f.action.Load().Gen, sp.gen)
		}
	case f.GuardMatches(sp.src, sp.dst, &sp.outerSrc, &sp.outerDst):
		// Cached under a policy newer than this batch started with:
		// another worker has decided it; decide this packet alone.
		sp.alone, sp.held = true, f.origin()
	default:
		if c := f.conn.Load(); c != nil && c.Stateful {
			// The connection stays; this packet is decided alone.
			w.Trace.Addf("flow %s is cached for other MACs or outer source: this packet decided on its own", f.key)
			sp.alone, sp.held = true, f.origin()
			break
		}
		// A stateless flow: this packet's decision replaces it.
		w.Trace.Addf("flow %s cached for other MACs or outer source: decided afresh", f.key)
		uft.RemoveConn(f)
		sp.flow = nil
	}
	return false
}

// decide has the layers decide the packet (SlowPath.Decide) and returns
// the decision, the worker's own. A packet of a held connection is decided
// with the connection's state, as revalidation decides its origin. The
// worker's views are left holding the packet as it arrived (orig) and as
// the decision leaves it (view); the decision's generation becomes the
// packet's.
func (w *Worker) decide(sp *slowPacket) *Decision {
	v := &w.view
	v.FromParsed(sp.p.Bytes(), &w.parsed, sp.p.InPort)
	w.orig = *v
	d := &w.dec // not a local: passed to an interface method, it would escape
	*d = Decision{Now: sp.now}
	if sp.held != nil {
		d.State, d.Revalidating = sp.held.State, true
	}
	w.pl.slow.Decide(v, w.Trace, d)
	if d.Gen == 0 {
		d.Gen = sp.gen
	}
	sp.gen = d.Gen
	return d
}

// commit carries out decision d on the packet: it drops or rejects it,
// applies d to it alone, or installs d and applies it (install). It
// returns the connection that holds d's state now, if any: the held
// connection of a packet decided alone, or the connection install made.
func (w *Worker) commit(sp *slowPacket, d *Decision) *Conn {
	p, pr := sp.p, &w.parsed
	s := d.spec()
	a, err := w.pl.action(&s, d.Own)
	if err != nil {
		w.Trace.Addf("transposition rejected: %v", err)
		w.drop(p, DropTransposition)
		return sp.held
	}
	if d.Reject && d.Drop != NotDropped {
		w.reject(p, pr, d.Drop)
		return sp.held
	}
	if d.NoCache || sp.alone || sp.icmpErr {
		w.apply(sp, a, sp.hash)
		return sp.held
	}
	return w.install(sp, d, a)
}

// install caches decision d, whose action is a, for the packet's flow,
// with the reply direction of a stateful one (installReverse), and applies
// it to the packet. It returns the flow's connection, which holds d's
// state if it took it; nil if the flow table had no room for the flow.
func (w *Worker) install(sp *slowPacket, d *Decision, a *Action) *Conn {
	p, pr := sp.p, &w.parsed
	// The packet as it arrived and as the decision left it (decide).
	orig, final := &w.orig, &w.view
	f, blk, why := w.insert(sp, a, d.Stateful && a.Drop == NotDropped && final.hasReply())
	if f == nil {
		w.drop(p, why)
		return nil
	}
	w.Flow = f
	ok := a.Drop != NotDropped || w.installReverse(f, orig, final, d, blk)
	// The connection, if it took the decision's state, releases it when
	// it goes (even just below): the caller must not release it again.
	c := f.conn.Load()
	if !ok {
		// A stateful connection whose replies could not be handled:
		// undo it rather than send into a black hole.
		w.pl.uft.RemoveConn(f)
		w.Flow = nil
		w.drop(p, DropFlowTableFull)
		return c
	}
	n := p.Len()
	w.apply(sp, a, sp.hash)
	w.pl.uft.Account(f, n, pr.Tenant().TCPFlags, sp.now)
	return c
}

// insert puts the packet's flow, with action a, in the table and returns
// it. sp.flow, a stale stateless flow, keeps its counters and takes a,
// unless it left the table meanwhile; otherwise a new flow goes in, made
// with its connection and reply flow in one block (returned) if withConn
// (a new stateful connection's). A flow another worker inserted first
// takes a instead. insert returns nil and why if the table had no room
// (DropFlowTableFull) or the packet's port held its share of it
// (DropFlowShareExceeded).
func (w *Worker) insert(sp *slowPacket, a *Action, withConn bool) (*Flow, *connBlock, DropReason) {
	if f := sp.flow; f != nil {
		// Stale stateless flow: keep it (and its counters), new action.
		w.pl.uft.SetAction(f, a)
		if !f.Removed() {
			return f, nil, NotDropped
		}
	}
	uft := w.pl.uft
	var blk *connBlock
	var nf *Flow
	if withConn {
		blk = new(connBlock)
		nf = &blk.fwd
		nf.init(*sp.key, a, sp.src, sp.dst, sp.outerSrc, sp.outerDst, sp.now)
	} else {
		nf = NewFlow(*sp.key, a, sp.src, sp.dst, sp.outerSrc, sp.outerDst, sp.now)
	}
	f, evicted, why := uft.InsertWhy(nf)
	if evicted != nil && w.Trace.On() {
		origin := evicted
		if c := evicted.conn.Load(); c != nil && c.fwd.Load() != nil {
			origin = c.fwd.Load()
		}
		w.Trace.Addf("flow table full: evicted the connection of %s, idle since %s", origin.key, fmtNanos(connLastSeen(evicted)))
	}
	if f == nil {
		if w.Trace.On() {
			w.Trace.Addf("%s (%d flows, %d of port %d's share of %d, %s)", why, uft.Len(),
				uft.PortFlows(nf.owner), nf.owner, uft.cfg.PortShare, uft.cfg.OnFull)
		}
		return nil, nil, why
	}
	if f != nf {
		uft.SetAction(f, a) // another worker got there first
		blk = nil
	}
	return f, blk, NotDropped
}

// reject drops p for reason r and, where an answer is due, turns it into
// the answer to its sender (Reject), sent back by the port it came in by.
// A rejected packet is never cached, so every retry is answered: a TCP
// segment with a reset, as Linux answers one to a closed port; anything
// else with an ICMP error, held to the worker's ICMP rate limit as the
// errors about an MTU are. The drop is counted as r, or as
// DropICMPRateLimited when the limit kept its ICMP error from being sent.
func (w *Worker) reject(p *Packet, pr *Parsed, r DropReason) {
	icmp := !pr.Encap && pr.Outer.Proto != ProtoTCP && rejectDue(p.Bytes(), &pr.Outer)
	if icmp && !w.icmp.take() {
		if w.Trace.On() {
			w.Trace.Addf("rejected (%s): dropped, unanswered: the ICMP rate limit is reached", r)
		}
		w.drop(p, DropICMPRateLimited)
		return
	}
	w.countDrop(p.InPort, r)
	if !Reject(p, pr) {
		if icmp {
			w.icmp.give()
		}
		p.Drop, p.OutPort = r, NoPort
		return
	}
	w.Trace.Addf("rejected (%s): answered to the sender", r)
	p.OutPort, p.Rejected = p.InPort, r
}

// settle releases state st (a decision's Decision.State) unless connection
// c (nil if none), the one the slow path installed or kept, holds it.
func settle(st any, c *Conn) {
	r, ok := st.(Releaser)
	if !ok {
		return
	}
	if c != nil {
		if cr, ok := c.State.(Releaser); ok && cr == r {
			return
		}
	}
	r.Release()
}

// installReverse installs the reply direction of decision d, a stateful
// one whose forward flow is f, or pairs a stateless flow with a reply flow
// already present. orig and final are the packet d was made for as it
// arrived and as d leaves it. installReverse reports false if a stateful
// connection's reply flow could not be installed (the table is full). blk,
// if not nil, is the block f is the fwd of: the connection and its reply
// flow are made in it.
func (w *Worker) installReverse(f *Flow, orig, final *View, d *Decision, blk *connBlock) bool {
	uft := w.pl.uft
	now := d.Now
	reply := final.Reversed()
	rkey := reply.Key(d.Out)
	if !d.Stateful || !final.hasReply() {
		if r := uft.Lookup(&rkey, rkey.Hash()); r != nil && r != f && r.conn.Load() == nil && f.conn.Load() == nil {
			uft.Pair(r, f, false, now)
		}
		return true
	}
	rht := ReverseHT(orig, final)
	rs := actionSpec{out: orig.InPort, mtu: d.ReplyMTU, drop: NotDropped, ht: rht, gen: d.Gen, meter: d.Meter}
	ra, err := w.pl.action(&rs, d.Own && rht.Set&FieldDstPort != 0)
	if err != nil {
		w.Trace.Addf("reverse transposition rejected: %v", err)
		return true
	}
	c := f.conn.Load()
	if c == nil || !c.Stateful {
		origin := Origin{OuterSrc: orig.OuterSrc, OuterDst: orig.OuterDst,
			OuterSrcMAC: orig.OuterSrcMAC, OuterDstMAC: orig.OuterDstMAC, OuterDstPort: orig.OuterDstPort}
		if blk != nil {
			c = uft.attachConn(&blk.conn, f, true, now, origin, d.State)
		} else {
			c = uft.AttachConn(f, true, now, origin, d.State)
		}
	}
	if old := c.rev.Load(); old != nil {
		if old.key == rkey {
			uft.SetAction(old, ra)
			return true
		}
		uft.Remove(old)
		c.rev.Store(nil)
	}
	// The reply's destination MAC is not guarded: the reverse
	// transposition sets it, and a reply may be addressed either to the
	// gateway or straight to the origin. Its source MAC is, unless the
	// slow path says any sender may answer.
	src := reply.SrcMAC
	if d.ReplyAnySrcMAC {
		src = MAC{}
	}
	var rf *Flow
	if blk != nil && c == &blk.conn {
		rf = &blk.rev
		rf.init(rkey, ra, src, MAC{}, Addr16(reply.OuterSrc), Addr16(reply.OuterDst), now)
	} else {
		rf = NewFlow(rkey, ra, src, MAC{}, Addr16(reply.OuterSrc), Addr16(reply.OuterDst), now)
	}
	rf.owner = f.owner // a connection is charged to its origin's port
	got := uft.insertReply(rf)
	if got != nil && got != rf {
		got = uft.replaceReply(got, rf, f)
	}
	if got == nil {
		w.Trace.Addf("reply flow %s not installed: flow table full", rkey)
		return false
	}
	c.rev.Store(got)
	got.conn.Store(c)
	if w.Trace.On() {
		// Guarded, as on every path a new flow takes: boxing the
		// arguments allocates even when the trace is off.
		w.Trace.Addf("stateful: reply flow %s -> %s", rkey, ra.HT)
	}
	return true
}

// revalidate re-decides stateful connection c from its origin after a
// policy change, then handles the packet (of c's flow f) with the new
// decision. It reports false if the packet must be decided as a new flow's.
func (w *Worker) revalidate(sp *slowPacket, f *Flow, c *Conn) bool {
	p := sp.p
	switch w.redecide(c, sp.gen, sp.now) {
	case connGone:
		return false
	case stateGone:
		return w.end(p, c)
	}
	if f != c.fwd.Load() && (f.Removed() || c.rev.Load() != f) {
		return false
	}
	w.Flow = f
	n := p.Len()
	w.apply(sp, f.action.Load(), sp.hash)
	w.pl.uft.Account(f, n, w.parsed.Tenant().TCPFlags, sp.now)
	return true
}

// redecision is what redecide found.
type redecision uint8

const (
	redecided redecision = iota // the new decision is installed
	stateGone                   // the connection's state no longer holds: end it
	connGone                    // the connection left the table meanwhile
)

// redecide re-decides stateful connection c from its origin under the
// running policy and installs the new decision on its flows. It reports
// stateGone if the connection's state no longer holds (the slow path
// dropped it as DropRevalidated: its backend is gone, its NAT mapping no
// longer applies): the caller ends it (end); and connGone if another
// worker removed the connection meanwhile (it expired, or ended): its
// packet is then a new flow's.
func (w *Worker) redecide(c *Conn, gen uint64, now int64) redecision {
	uft := w.pl.uft
	fwd := c.fwd.Load()
	if fwd.Removed() {
		return connGone
	}
	old := fwd.action.Load().Gen
	v, orig := &w.view, &w.orig
	v.FromFlow(fwd, c)
	*orig = *v
	d := &w.dec
	*d = Decision{State: c.State, Revalidating: true, Now: now}
	if w.Trace.On() {
		w.Trace.Addf("revalidate connection %s (generation %d -> %d)", fwd.key, old, gen)
	}
	w.pl.slow.Decide(v, w.Trace, d)
	if d.Gen == 0 {
		d.Gen = gen
	}
	// The connection keeps the state it has; anything the decision
	// allocated beside it is given back.
	settle(d.State, c)
	switch {
	case fwd.Removed():
		return connGone
	case d.Drop == DropRevalidated:
		return stateGone
	}
	s := d.spec()
	a, err := w.pl.action(&s, d.Own)
	if err != nil {
		w.Trace.Addf("transposition rejected: %v", err)
		return stateGone
	}
	w.pl.uft.SetAction(fwd, a)
	if a.Drop == NotDropped && d.Stateful {
		w.installReverse(fwd, orig, v, d, nil)
	} else if r := c.rev.Load(); r != nil {
		// The reply direction is no longer implied by the origin's
		// decision: it goes through the layers on its own next time.
		c.rev.Store(nil)
		uft.Remove(r)
	}
	return redecided
}

// end ends connection c, whose state no longer holds under the running
// policy: it leaves the flow table (releasing its state), so that its next
// packet opens a new connection, balanced or translated afresh, rather
// than each packet refreshing a cached drop for as long as the peers keep
// sending. Packet p of it is answered with a reset if it is a TCP segment
// other than a SYN, so that its sender learns at once (as a Service with
// no backends answers, ARCHITECTURE.md); end reports true then. Any other
// packet (a UDP datagram, an echo, a SYN) is the first of a new connection:
// end reports false and p takes the slow path as a new flow.
func (w *Worker) end(p *Packet, c *Conn) bool {
	fwd := c.fwd.Load()
	w.pl.uft.RemoveConn(fwd)
	pr := &w.parsed
	if h := pr.Tenant(); h.Proto == ProtoTCP && h.TCPFlags&(TCPSyn|TCPAck) != TCPSyn {
		if w.Trace.On() {
			w.Trace.Addf("connection %s ended: its state no longer holds", fwd.key)
		}
		w.reject(p, pr, DropRevalidated)
		return true
	}
	if w.Trace.On() {
		w.Trace.Addf("connection %s ended: its state no longer holds; this packet opens a new one", fwd.key)
	}
	return false
}

// fmtNanos formats a time on the pipeline's clock for traces.
func fmtNanos(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 6, 64) + "s"
}

// related translates ICMP error sp.p as the replies of the stateful
// connection it quotes a packet of are translated: the quoted packet gets
// back the addresses and ports its sender knows (RFC 5508 section 4 for
// NAT; the same for any stateful translation), every checksum follows, and
// the error goes where the connection's replies go. It reports false if the
// error quotes no packet of a live stateful connection; it then takes the
// slow path like any other packet.
func (w *Worker) related(sp *slowPacket) bool {
	p, pr := sp.p, &w.parsed
	h := pr.Tenant()
	q := &w.quote
	b := p.Bytes()
	if !ParseQuote(b, h, q) || q.L4 == 0 && !q.LaterFragment && (q.Proto == ProtoTCP || q.Proto == ProtoUDP) {
		return false
	}
	// The quote is a packet of the connection as it left the switch the
	// way the error came in; the error travels as a reply to it.
	qv := q.View(p.InPort)
	f := w.quotedFlow(sp, &qv)
	if f == nil {
		return false
	}
	a := f.action.Load()
	if a.Drop != NotDropped || pr.Encap && a.HT.Outer != OuterPop {
		// (An error forwarded still in its tunnel would need the outer
		// UDP checksum updated for the quote too: not translated.)
		return false
	}
	r, ht := quoteRewrite(&a.HT, h.Src == q.Dst)
	es := actionSpec{out: a.Out, mtu: a.MTU, drop: NotDropped, ht: ht, gen: a.Gen}
	oa, err := w.pl.action(&es, false)
	if err != nil {
		return false
	}
	if w.Trace.On() {
		w.Trace.Addf("icmp error %d/%d quoting %s: related to connection of flow %s", uint8(h.DstPort>>8), uint8(h.DstPort), qv.Key(p.InPort), f.key)
	}
	partial := p.Offload.NeedsCsum && int32(p.Offload.CsumStart) == h.L4
	RewriteQuote(b, h, q, &r, partial)
	if w.Trace.On() {
		w.Trace.Addf("  quote rewritten to %s -> %s, error %s", q.SrcAddr(), q.DstAddr(), ht)
	}
	w.apply(sp, oa, f.hash)
	return true
}

// quotedFlow returns the flow that an ICMP error quoting packet qv travels
// as a reply of: a flow of a live stateful connection, revalidated first if
// the policy changed since the connection's last packet; nil if there is
// none.
func (w *Worker) quotedFlow(sp *slowPacket, qv *View) *Flow {
	rv := qv.Reversed()
	if pr := &w.parsed; pr.Encap {
		// Arrived in a tunnel, as the connection's replies do: their
		// flow is keyed with the tunnel's VNI.
		rv.Encap, rv.VNI = true, pr.VNI
	}
	k := rv.Key(sp.p.InPort)
	uft := w.pl.uft
	f := uft.Lookup(&k, k.Hash())
	if f == nil || f.Removed() || uft.Expired(f, sp.now) {
		return nil
	}
	c := f.conn.Load()
	if c == nil || !c.Stateful {
		return nil
	}
	if f.action.Load().Gen < sp.gen {
		// The policy changed since the connection's last packet: it is
		// revalidated first, as that packet would be.
		rev := f != c.fwd.Load()
		if w.redecide(c, sp.gen, sp.now) != redecided {
			uft.RemoveConn(c.fwd.Load())
			return nil
		}
		if rev {
			f = c.rev.Load() // nil if the reply direction went
		}
	}
	return f
}

// quoteRewrite returns what an ICMP error related to a connection gets,
// where t is the transposition of the connection's replies: the rewrite of
// its quote (the reverse of t's address and port changes), and the
// error's own transposition. The error goes where replies go, from where it
// came: t without its port changes, and without its source address unless
// the error comes from the connection's peer itself (fromPeer).
func quoteRewrite(t *Transposition, fromPeer bool) (QuoteRewrite, Transposition) {
	var r QuoteRewrite
	if t.Set&FieldDstIP != 0 {
		r.Set, r.SrcIP = r.Set|FieldSrcIP, t.DstIP
	}
	if t.Set&FieldSrcIP != 0 {
		r.Set, r.DstIP = r.Set|FieldDstIP, t.SrcIP
	}
	if t.Set&FieldDstPort != 0 {
		r.Set, r.SrcPort = r.Set|FieldSrcPort, t.DstPort
	}
	if t.Set&FieldSrcPort != 0 {
		r.Set, r.DstPort = r.Set|FieldDstPort, t.SrcPort
	}
	ht := *t
	ht.Set &^= FieldSrcPort | FieldDstPort | fieldEchoIDDst
	if !fromPeer {
		ht.Set &^= FieldSrcIP
	}
	return r, ht
}
