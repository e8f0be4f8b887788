package dataplane

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unique"
	"unsafe"
)

// FullPolicy says what the flow table does with a new flow when it is full.
type FullPolicy uint8

// Whatever the policy, a full table first makes room by early drop, as
// Linux conntrack does: it looks at up to EarlyDropSample flows in each of
// up to EarlyDropShards shards, starting with the new flow's, and removes
// the connection idle longest among the first shard's unassured ones (a
// TCP connection whose handshake has not completed in both directions, a
// UDP, ICMP or other flow never answered). An assured connection is never
// early-dropped. Only when the sample holds no unassured flow does the
// policy apply.
const (
	// RefuseNew drops the packet of a new flow that does not fit
	// (DropFlowTableFull); assured connections are untouched.
	RefuseNew FullPolicy = iota
	// EvictOldest makes room by evicting, from the new flow's shard, the
	// connection idle longest among a sample of EvictSample.
	EvictOldest
)

// EarlyDropShards and EarlyDropSample bound the work of one early drop:
// at most their product of flows looked at per new flow that does not
// fit, so that a flood into a table full of assured connections costs
// little more per packet than one that fits.
const (
	EarlyDropShards = 4
	EarlyDropSample = 16
)

// EvictSample is how many connections EvictOldest compares.
const EvictSample = 8

func (f FullPolicy) String() string {
	if f == EvictOldest {
		return "evict-oldest"
	}
	return "refuse-new"
}

// Timeouts are the idle times after which a connection's flows expire, by
// protocol and TCP state. Zero fields take the defaults of DefaultTimeouts().
type Timeouts struct {
	TCPEstablished time.Duration // both directions seen, no FIN or RST
	TCPHalfOpen    time.Duration // SYN seen, handshake not complete in both directions
	TCPTransitory  time.Duration // FIN in one direction
	TCPTimeWait    time.Duration // FIN seen in both directions
	TCPClosed      time.Duration // RST seen
	UDP            time.Duration // UDP with traffic in both directions
	UDPUnreplied   time.Duration // UDP seen in one direction only
	ICMP           time.Duration
	Other          time.Duration
}

// DefaultTimeouts returns the default timeouts. Connections both ends
// take part in follow the NAT behaviour RFCs where they give a figure:
// RFC 5382 (TCP established >= 2 h 4 min, transitory >= 4 min), RFC 4787
// (UDP >= 2 min), RFC 5508 (ICMP query 60 s).
//
// Flows nobody answered age fast, so that a flood of them (spoofed SYNs,
// UDP to random ports) leaves the table within seconds: TCP half-open 10 s
// and UDP unreplied 10 s, where Linux conntrack keeps 120 s (syn_sent),
// 60 s (syn_recv) and 30 s (udp unreplied). 10 s covers a client's first
// four SYN retransmissions (Linux sends them 1, 2, 4 and 8 s apart) and a
// resolver's retry (5 s); a later retry makes a new flow. This is shorter
// than RFC 5382's 4 min for partially open connections, which matters
// only to TCP simultaneous open through the NAT; set TCPHalfOpen to 4 min
// where that is wanted.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		TCPEstablished: 2*time.Hour + 4*time.Minute,
		TCPHalfOpen:    10 * time.Second,
		TCPTransitory:  4 * time.Minute,
		TCPTimeWait:    30 * time.Second,
		TCPClosed:      10 * time.Second,
		UDP:            2 * time.Minute,
		UDPUnreplied:   10 * time.Second,
		ICMP:           60 * time.Second,
		Other:          2 * time.Minute,
	}
}

func (t *Timeouts) fill() {
	def := DefaultTimeouts()
	d := &def
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.TCPEstablished, &d.TCPEstablished}, {&t.TCPHalfOpen, &d.TCPHalfOpen}, {&t.TCPTransitory, &d.TCPTransitory},
		{&t.TCPTimeWait, &d.TCPTimeWait}, {&t.TCPClosed, &d.TCPClosed},
		{&t.UDP, &d.UDP}, {&t.UDPUnreplied, &d.UDPUnreplied},
		{&t.ICMP, &d.ICMP}, {&t.Other, &d.Other},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
}

// FlowTableConfig configures a FlowTable.
type FlowTableConfig struct {
	// MaxFlows bounds the number of flows (one per direction) held at once.
	MaxFlows int
	// Shards is the number of independently locked shards, a power of two;
	// 0 means 64.
	Shards int
	// OnFull says what happens to a new flow when MaxFlows are held.
	OnFull FullPolicy
	// PortShare bounds the flows charged to one port (0: MaxFlows). A
	// connection's flows are charged to the port its origin came by (a
	// pod's vNIC, or the uplink for connections from outside), and the
	// bound is checked when an origin flow goes in: a port holds at most
	// PortShare+1 flows. A port at its share makes room by early drop
	// among its own flows; failing that its new flow is refused
	// (DropFlowShareExceeded).
	PortShare int
	Timeouts  Timeouts
}

// Validate checks c and fills in defaults.
func (c *FlowTableConfig) Validate() error {
	if c.MaxFlows <= 0 {
		return fmt.Errorf("flowTable.maxFlows: must be positive, got %d", c.MaxFlows)
	}
	if c.Shards == 0 {
		c.Shards = 64
	}
	if c.Shards < 0 || c.Shards&(c.Shards-1) != 0 || c.Shards > 1<<16 {
		return fmt.Errorf("flowTable.shards: must be a power of two up to 65536, got %d", c.Shards)
	}
	if c.PortShare < 0 {
		return fmt.Errorf("flowTable.maxFlowsPerPort: must not be negative, got %d", c.PortShare)
	}
	if c.PortShare == 0 || c.PortShare > c.MaxFlows {
		c.PortShare = c.MaxFlows
	}
	if c.OnFull > EvictOldest {
		return fmt.Errorf("flowTable.onFull: unknown policy %d", c.OnFull)
	}
	for _, d := range []time.Duration{c.Timeouts.TCPEstablished, c.Timeouts.TCPHalfOpen, c.Timeouts.TCPTransitory, c.Timeouts.TCPTimeWait,
		c.Timeouts.TCPClosed, c.Timeouts.UDP, c.Timeouts.UDPUnreplied, c.Timeouts.ICMP, c.Timeouts.Other} {
		if d < 0 {
			return fmt.Errorf("flowTable.timeouts: negative duration %s", d)
		}
	}
	c.Timeouts.fill()
	return nil
}

// Flow is one direction of a connection in the flow table: its key, the
// cached action, the fields the decision depended on that are not in the key
// (the guard), and counters. The table owns its flows; callers get read-only
// views of them. Safe for concurrent use.
type Flow struct {
	// The fields are ordered to pack into 128 bytes (TestFlowSize).
	key    FlowKey
	state  atomic.Uint32 // TCP flags seen (low byte) | flowRemoved
	action atomic.Pointer[Action]
	conn   atomic.Pointer[Conn]
	// next chains the flows of a shard whose keys have the same hash;
	// guarded by the shard's lock.
	next *Flow

	packets  atomic.Uint64
	bytes    atomic.Uint64
	lastSeen atomic.Int64

	// guard: the decision depended on these; a packet that differs takes
	// the slow path. outer holds the outer source and destination
	// addresses of an encapsulated packet, interned (few tunnel ends
	// serve many flows): the zero Handle for a packet that is not.
	macs [12]byte // destination then source, as in the Ethernet header
	// filed is the expiry wheel slot the flow is filed at (see wheel),
	// its low 32 bits; under the shard's lock.
	filed atomic.Uint32
	outer unique.Handle[outerAddrs]

	hash  uint32 // key.Hash()
	owner PortID // the port the flow is charged to (FlowTableConfig.PortShare)
}

// outerAddrs are a packet's outer source and destination addresses, as
// Headers holds them.
type outerAddrs struct{ src, dst [16]byte }

const flowRemoved = 1 << 16

// NewFlow returns a flow for key whose packets carry the given source and
// destination MACs and, if encapsulated, outer source and destination
// addresses (zero if not).
func NewFlow(key FlowKey, a *Action, srcMAC, dstMAC MAC, outerSrc, outerDst [16]byte, now int64) *Flow {
	f := new(Flow)
	f.init(key, a, srcMAC, dstMAC, outerSrc, outerDst, now)
	return f
}

// init makes f, a zero Flow, a new flow as NewFlow does.
func (f *Flow) init(key FlowKey, a *Action, srcMAC, dstMAC MAC, outerSrc, outerDst [16]byte, now int64) {
	f.key, f.hash, f.owner = key, key.Hash(), key.InPort
	if outerSrc != ([16]byte{}) || outerDst != ([16]byte{}) {
		f.outer = unique.Make(outerAddrs{outerSrc, outerDst})
	}
	copy(f.macs[0:6], dstMAC[:])
	copy(f.macs[6:12], srcMAC[:])
	f.action.Store(a)
	f.lastSeen.Store(now)
}

// connBlock is a new stateful connection's Conn and flows, allocated at
// once (one allocation instead of three, of the same 320 bytes): the
// slow path uses its parts for the connection it installs, or leaves
// them unused where the table already held a flow.
type connBlock struct {
	conn     Conn
	fwd, rev Flow
}

// Key returns the flow's key.
func (f *Flow) Key() FlowKey { return f.key }

// Action returns the flow's current action.
func (f *Flow) Action() *Action { return f.action.Load() }

// Conn returns the connection the flow belongs to, nil if none.
func (f *Flow) Conn() *Conn { return f.conn.Load() }

// Packets and Bytes return the flow's counters.
func (f *Flow) Packets() uint64 { return f.packets.Load() }
func (f *Flow) Bytes() uint64   { return f.bytes.Load() }

// LastSeen returns the time of the flow's last packet.
func (f *Flow) LastSeen() int64 { return f.lastSeen.Load() }

// Removed reports whether the flow has left the table.
func (f *Flow) Removed() bool { return f.state.Load()&flowRemoved != 0 }

// GuardMatches reports whether a packet with these MACs and outer source
// and destination addresses may use the flow's action. A flow made with a
// zero destination MAC (the reply direction of a stateful connection, whose
// transposition sets it anyway) matches any destination MAC; one made with
// a zero source MAC (a reply any sender may give) any source MAC.
func (f *Flow) GuardMatches(src, dst MAC, outerSrc, outerDst *[16]byte) bool {
	fd, fs := MAC(f.macs[0:6]), MAC(f.macs[6:12])
	return (fs == src || fs.IsZero()) && (fd == dst || fd.IsZero()) && f.outerIs(outerSrc, outerDst)
}

// outerIs reports whether the flow's guard holds these outer addresses
// (zero for none).
func (f *Flow) outerIs(src, dst *[16]byte) bool {
	if f.outer == (unique.Handle[outerAddrs]{}) {
		return *src == [16]byte{} && *dst == [16]byte{}
	}
	o := f.outer.Value()
	return o.src == *src && o.dst == *dst
}

// guardOK is GuardMatches for the fast path: eth is the packet's tenant
// Ethernet header, outer its outer headers (nil if none).
func (f *Flow) guardOK(eth []byte, outer *Headers) bool {
	// The 12 bytes of MACs as two words each: destination in the low 48
	// bits of the first, source in its high 16 and the second's 32.
	le := binary.LittleEndian
	const low48 = 1<<48 - 1
	e0, e1 := le.Uint64(eth[:8]), le.Uint32(eth[8:12])
	m0, m1 := le.Uint64(f.macs[:8]), le.Uint32(f.macs[8:12])
	if e0 != m0 || e1 != m1 {
		dst, src := m0&low48, m0>>48|uint64(m1)<<16
		if dst != e0&low48 && dst != 0 || src != e0>>48|uint64(e1)<<16 && src != 0 {
			return false
		}
	}
	if outer == nil {
		return f.outer == unique.Handle[outerAddrs]{}
	}
	return f.outerIs(&outer.Src, &outer.Dst)
}

// Account counts one packet of n bytes of f, a flow of t, with TCP flags
// tcp at time now; n == 0 records the flags and time only.
func (t *FlowTable) Account(f *Flow, n int, tcp uint8, now int64) {
	if f.account(n, tcp, now) {
		t.touch(f)
	}
	if n > 0 {
		t.changed(f.hash)
	}
}

// account is Account for f alone: it reports whether the packet changed
// what f's timeout depends on (a TCP flag not seen before, or f's first
// packet), for the caller to tell the table (touch).
func (f *Flow) account(n int, tcp uint8, now int64) bool {
	changed := false
	if n > 0 {
		changed = f.packets.Add(1) == 1
		f.bytes.Add(uint64(n))
	}
	if f.lastSeen.Load() < now {
		f.lastSeen.Store(now)
	}
	if tcp != 0 {
		if s := f.state.Load(); uint32(tcp)&^s != 0 {
			f.state.Or(uint32(tcp))
			changed = true
		}
	}
	return changed
}

// Conn is the state a connection's two directions share: the flows, the
// connection-level data stateful actions attach (a NAT mapping, a chosen
// backend), and what revalidation needs to re-run the origin direction.
//
// Everything but the two flow pointers is set before the Conn is published
// (attached to a flow) and never written after, so workers read it without
// locks.
type Conn struct {
	fwd atomic.Pointer[Flow] // the origin direction
	rev atomic.Pointer[Flow] // the reply direction, if installed
	// Stateful: the reply direction was installed from the origin's
	// decision (ReverseHT) and is revalidated with it.
	Stateful bool
	// Origin is what the origin packet carried beyond its flow key and
	// guard, for re-deciding it after a policy change: the outer header
	// set of an encapsulated origin; nil for any other (most connections,
	// which so do not carry its 64 bytes).
	Origin  *Origin
	Created int64
	// State is what stateful actions attach. The table looks at it only
	// to release it (see Releaser) when the connection leaves the table.
	State    any
	released atomic.Bool
}

// Releaser is connection state that holds a resource to give back when the
// connection ends, such as a NAT port. The flow table calls Release once,
// when the connection's origin flow leaves the table (expiry, eviction,
// removal, flush), possibly while holding a shard lock: Release must be
// quick and must not call back into the table.
type Releaser interface {
	Release()
}

// release gives back the connection's state, once.
func (c *Conn) release() {
	if r, ok := c.State.(Releaser); ok && c.released.CompareAndSwap(false, true) {
		r.Release()
	}
}

// Origin holds the outer header set of an encapsulated origin packet.
type Origin struct {
	OuterSrc, OuterDst       netip.Addr
	OuterSrcMAC, OuterDstMAC MAC
	OuterDstPort             uint16
}

// Fwd returns the origin direction's flow.
func (c *Conn) Fwd() *Flow { return c.fwd.Load() }

// Rev returns the reply direction's flow, nil if none.
func (c *Conn) Rev() *Flow { return c.rev.Load() }

// Other returns the flow of the direction opposite to f.
func (c *Conn) Other(f *Flow) *Flow {
	if fw := c.fwd.Load(); fw != f {
		return fw
	}
	return c.rev.Load()
}

// FlowTable is the unified flow table: a concurrent, bounded map from flow
// keys to flows, sharded by key hash. Safe for concurrent use.
type FlowTable struct {
	cfg    FlowTableConfig
	shards []shard
	mask   uint32
	tmo    [numTimeoutKinds]int64
	minTmo int64 // the smallest of tmo

	count                               atomic.Int64
	inserted, expired, evicted, refused atomic.Uint64
	earlyDropped, shareRefused          atomic.Uint64
	// perPort counts the flows charged to each port (Flow.owner).
	perPort []atomic.Int32

	// Expiry (see wheel): the slots of each shard's wheel (a power of
	// two), the flows whose due time moved earlier, and the expiry
	// pass's lock and scratch space.
	wheelSlots int
	pending    *pendingRing
	expireMu   sync.Mutex
	touched    []*Flow
	gone       []*Flow
	visits     uint64 // wheel entries the passes looked at, for tests

	// MeterTraffic's: a flag per shard whose flows changed, and each
	// shard's sums.
	dirty     []dirtyFlag
	trafficMu sync.Mutex
	traffic   []map[Meter]Traffic
}

// A shard maps key hashes to flows, chaining the rare flows whose keys
// share a hash through Flow.next: a map keyed by the 44-byte FlowKey would
// cost about 100 bytes more per flow.
//
// A Go map never gives back the memory of its deleted entries: a shard
// whose map holds a quarter of its peak is rebuilt (shrinkLocked), so
// that the memory of flows expired or flushed in bulk is returned.
type shard struct {
	mu   sync.RWMutex
	m    map[uint32]*Flow
	peak int // the most keys m held since it was made
	w    wheel
	// Keep shards on their own cache lines.
	_ [(64 - (unsafe.Sizeof(sync.RWMutex{})+unsafe.Sizeof(map[uint32]*Flow(nil))+unsafe.Sizeof(0)+unsafe.Sizeof(wheel{}))%64) % 64]byte
}

// shrinkMin is the peak below which a shard's map is rebuilt only when
// it empties, and shrinkEmptyMin the peak below which not even then.
const (
	shrinkMin      = 1024
	shrinkEmptyMin = 64
)

// shrinkLocked rebuilds s's map, and its expiry wheel, if the map holds
// under a quarter of its peak: the cost, one copy of what is left, is
// paid for by the removals since the peak (at least three times as
// many). The wheel's lists drop the entries of the flows removed, which
// they would otherwise keep until their slots came due.
func (t *FlowTable) shrinkLocked(s *shard) {
	if (s.peak < shrinkMin || len(s.m) >= s.peak/4) && (len(s.m) != 0 || s.peak < shrinkEmptyMin) {
		return
	}
	m := make(map[uint32]*Flow, len(s.m))
	for h, f := range s.m {
		m[h] = f
	}
	s.m, s.peak = m, len(m)
	t.rebuildLocked(s)
}

// findLocked returns the flow of s with key k, whose hash is hash.
func (s *shard) findLocked(k *FlowKey, hash uint32) *Flow {
	f := s.m[hash]
	for f != nil && !f.key.Equal(k) {
		f = f.next
	}
	return f
}

// NewFlowTable returns an empty table.
func NewFlowTable(cfg FlowTableConfig) (*FlowTable, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &FlowTable{cfg: cfg, shards: make([]shard, cfg.Shards), mask: uint32(cfg.Shards - 1),
		perPort: make([]atomic.Int32, int(NoPort)+1), dirty: make([]dirtyFlag, cfg.Shards)}
	// About 256 slots (4.6 min) per shard, fewer with many shards: a
	// flow filed further ahead is looked at once per turn of the wheel.
	t.wheelSlots = max(16, min(256, 1<<18/cfg.Shards))
	// Room for the state changes of a second (two per connection that
	// closes), up to 64k.
	t.pending = newPendingRing(max(256, min(1<<16, int(nextPow2(uint64(cfg.MaxFlows/64))))))
	for i := range t.shards {
		t.shards[i].m = make(map[uint32]*Flow)
	}
	to := &cfg.Timeouts
	for i, d := range [numTimeoutKinds]time.Duration{to.TCPEstablished, to.TCPHalfOpen, to.TCPTransitory, to.TCPTimeWait,
		to.TCPClosed, to.UDP, to.UDPUnreplied, to.ICMP, to.Other} {
		t.tmo[i] = int64(d)
	}
	t.minTmo = slices.Min(t.tmo[:])
	return t, nil
}

// Config returns the table's configuration, defaults filled in.
func (t *FlowTable) Config() FlowTableConfig { return t.cfg }

// Hash returns the hash of k: the table's shard choice and the entropy of
// pushed VXLAN headers. It is a fixed function of the key, so traces and
// pushed headers are reproducible.
func (k *FlowKey) Hash() uint32 {
	// Three independent 64x64->128-bit multiply-mix lanes over 64-bit loads
	// of the key (the folded-multiply step of wyhash), folded to 32 bits.
	const (
		c0 = 0xa0761d6478bd642f
		c1 = 0xe7037ed1a0b428db
		c2 = 0x8ebc6af09c88c6e3
		c3 = 0x589965cc75374cc3
	)
	le := binary.LittleEndian
	misc := uint64(k.VNI) | uint64(k.SrcPort)<<32 | uint64(k.DstPort)<<48
	misc2 := uint64(k.InPort) | uint64(k.Proto)<<16 | uint64(k.Flags)<<24
	x := mum(le.Uint64(k.Src[0:])^c0, le.Uint64(k.Dst[0:])^c1)
	y := mum(le.Uint64(k.Src[8:])^c2, le.Uint64(k.Dst[8:])^c3)
	z := mum(misc^c1, misc2^c2)
	h := mum(x^c0, y^z^c3)
	return uint32(h ^ h>>32)
}

// mum multiplies a and b into 128 bits and folds the halves.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func (t *FlowTable) shardOf(hash uint32) *shard { return &t.shards[hash&t.mask] }

// Lookup returns the flow for k (whose Hash is hash), or nil.
func (t *FlowTable) Lookup(k *FlowKey, hash uint32) *Flow {
	s := t.shardOf(hash)
	s.mu.RLock()
	f := s.findLocked(k, hash)
	s.mu.RUnlock()
	return f
}

// Len returns the number of flows held.
func (t *FlowTable) Len() int { return int(t.count.Load()) }

// Stats are the table's counters. Refused counts the new flows refused,
// for want of room in the table or (ShareRefused of them) because their
// port held its share; EarlyDropped the unassured flows removed to make
// room (see FullPolicy), Evicted those EvictOldest removed.
type FlowTableStats struct {
	Flows                               int
	Inserted, Expired, Evicted, Refused uint64
	EarlyDropped, ShareRefused          uint64
}

// Stats returns the table's counters.
func (t *FlowTable) Stats() FlowTableStats {
	return FlowTableStats{Flows: t.Len(), Inserted: t.inserted.Load(), Expired: t.expired.Load(),
		Evicted: t.evicted.Load(), Refused: t.refused.Load(),
		EarlyDropped: t.earlyDropped.Load(), ShareRefused: t.shareRefused.Load()}
}

// PortFlows returns the number of flows charged to port id.
func (t *FlowTable) PortFlows(id PortID) int { return int(t.perPort[id].Load()) }

// Insert adds f unless a flow with its key is present, in which case the
// present flow is returned and f is not added. It returns nil if the table
// is full and cannot make room (RefuseNew, or nothing to evict), or f's
// port holds its share.
func (t *FlowTable) Insert(f *Flow) *Flow {
	got, _, _ := t.InsertWhy(f)
	return got
}

// InsertEvict is Insert that also returns the flow evicted or early-dropped
// to make room, or nil. The evicted flow's partner is removed with it.
func (t *FlowTable) InsertEvict(f *Flow) (got, evicted *Flow) {
	got, evicted, _ = t.InsertWhy(f)
	return got, evicted
}

// InsertWhy is InsertEvict that also says why it returns nil:
// DropFlowShareExceeded or DropFlowTableFull. f is an origin flow: its
// port's share is checked.
func (t *FlowTable) InsertWhy(f *Flow) (got, evicted *Flow, why DropReason) {
	return t.insert(f, true)
}

// insertReply inserts rf, the reply flow of a connection whose origin is
// in the table, charged to rf.owner but not held to its share: the origin
// was.
func (t *FlowTable) insertReply(rf *Flow) *Flow {
	got, _, _ := t.insert(rf, false)
	return got
}

// insert adds f as InsertWhy does, holding its port to its share if share.
func (t *FlowTable) insert(f *Flow, share bool) (got, evicted *Flow, why DropReason) {
	s := t.shardOf(f.hash)
	if got, why = t.add(s, f, share); got != nil {
		return got, nil, NotDropped
	}
	// Make room (early drop, then EvictOldest) and try again. Another
	// worker's insert may take the place made first, so up to roomTries
	// times; evicted is the last connection removed.
	for range roomTries {
		ev := t.makeRoom(f.hash, f.owner, why == DropFlowShareExceeded)
		if ev == nil {
			break
		}
		evicted = ev
		if got, why = t.add(s, f, share); got != nil {
			return got, evicted, NotDropped
		}
	}
	return nil, evicted, t.refuse(why)
}

// add adds f to its shard s and returns it, or returns the flow present
// with f's key, or nil and why f's port may hold no more flows (the
// table full, or the port at its share).
func (t *FlowTable) add(s *shard, f *Flow, share bool) (*Flow, DropReason) {
	s.mu.Lock()
	if old := s.findLocked(&f.key, f.hash); old != nil {
		s.mu.Unlock()
		return old, NotDropped
	}
	why := t.reserve(f.owner, share)
	if why == NotDropped {
		s.addLocked(f)
		t.fileLocked(s, f)
		t.changed(f.hash)
	}
	s.mu.Unlock()
	if why != NotDropped {
		return nil, why
	}
	t.inserted.Add(1)
	return f, NotDropped
}

// roomTries is how many times an insert into a full table makes room
// before it is refused: under a flood, another worker's insert takes the
// place made before the retry about once in a thousand inserts.
const roomTries = 3

// refuse counts a refusal for why and returns it.
func (t *FlowTable) refuse(why DropReason) DropReason {
	t.refused.Add(1)
	if why == DropFlowShareExceeded {
		t.shareRefused.Add(1)
	}
	return why
}

// makeRoom removes a connection to make room for a new flow of hash,
// charged to port owner: an unassured one by early drop, among owner's own
// flows only if ownOnly (the port holds its share); failing that, with
// EvictOldest and a full table, the one idle longest. It returns the flow
// removed (its partner removed too), or nil.
func (t *FlowTable) makeRoom(hash uint32, owner PortID, ownOnly bool) *Flow {
	for i := uint32(0); i < EarlyDropShards && i < uint32(len(t.shards)); i++ {
		o := &t.shards[(hash+i)&t.mask]
		o.mu.Lock()
		f := t.earlyDropLocked(o, owner, ownOnly)
		o.mu.Unlock()
		if f != nil {
			t.dropPartner(f)
			return f
		}
	}
	if ownOnly || t.cfg.OnFull != EvictOldest {
		return nil
	}
	// Evict from the new flow's shard, or the next one that has flows.
	for i := uint32(0); i < uint32(len(t.shards)); i++ {
		o := &t.shards[(hash+i)&t.mask]
		o.mu.Lock()
		f := t.evictLocked(o)
		o.mu.Unlock()
		if f != nil {
			t.dropPartner(f)
			return f
		}
	}
	return nil
}

// earlyDropLocked removes from s the unassured connection idle longest
// among a sample of EarlyDropSample flows (those charged to owner only, if
// ownOnly) and returns it, or nil if the sample holds none.
func (t *FlowTable) earlyDropLocked(s *shard, owner PortID, ownOnly bool) *Flow {
	var victim *Flow
	var victimSeen int64
	n := 0
	for _, f := range s.m {
		for ; f != nil && n < EarlyDropSample; f = f.next {
			n++
			if ownOnly && f.owner != owner || !unassured(f) {
				continue
			}
			if seen := connLastSeen(f); victim == nil || seen < victimSeen {
				victim, victimSeen = f, seen
			}
		}
		if n == EarlyDropSample {
			break
		}
	}
	if victim != nil {
		t.deleteLocked(s, victim)
		t.earlyDropped.Add(1)
	}
	return victim
}

// reserve takes a place for a new flow charged to port owner unless
// MaxFlows are held (DropFlowTableFull) or, if share, owner holds its
// share (DropFlowShareExceeded). Inserts into different shards race for
// the last places; reserving one before adding the flow keeps Len within
// MaxFlows.
func (t *FlowTable) reserve(owner PortID, share bool) DropReason {
	pc := &t.perPort[owner]
	if share && t.cfg.PortShare < t.cfg.MaxFlows && int(pc.Load()) >= t.cfg.PortShare {
		return DropFlowShareExceeded
	}
	for {
		n := t.count.Load()
		if n >= int64(t.cfg.MaxFlows) {
			return DropFlowTableFull
		}
		if t.count.CompareAndSwap(n, n+1) {
			pc.Add(1)
			return NotDropped
		}
	}
}

// evictLocked removes from s the flow, among a sample, whose connection has
// been idle longest, and returns it so that its partner can be removed
// after s is unlocked.
func (t *FlowTable) evictLocked(s *shard) *Flow {
	var oldest *Flow
	var oldestSeen int64
	n := 0
	for _, f := range s.m {
		for ; f != nil && n < EvictSample; f = f.next {
			seen := connLastSeen(f)
			if oldest == nil || seen < oldestSeen {
				oldest, oldestSeen = f, seen
			}
			n++
		}
		if n == EvictSample {
			break
		}
	}
	if oldest == nil {
		return nil
	}
	t.deleteLocked(s, oldest)
	t.evicted.Add(1)
	return oldest
}

// addLocked adds f, whose key s does not hold, to s.
func (s *shard) addLocked(f *Flow) {
	f.next = s.m[f.hash]
	s.m[f.hash] = f
	s.peak = max(s.peak, len(s.m))
}

// deleteLocked removes f, which s holds, from s.
func (t *FlowTable) deleteLocked(s *shard, f *Flow) {
	switch head := s.m[f.hash]; {
	case head == f && f.next == nil:
		delete(s.m, f.hash)
	case head == f:
		s.m[f.hash] = f.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == f {
				p.next = f.next
				break
			}
		}
	}
	f.next = nil
	f.state.Or(flowRemoved)
	t.changed(f.hash)
	t.count.Add(-1)
	t.perPort[f.owner].Add(-1)
	if m := f.action.Load().Meter; m != nil {
		m.Retire(f.packets.Load(), f.bytes.Load())
	}
	if c := f.conn.Load(); c != nil && c.fwd.Load() == f {
		c.release()
	}
}

// dropPartner removes the other direction of removed flow f's connection.
// It reports whether it removed one.
func (t *FlowTable) dropPartner(f *Flow) bool {
	if f == nil {
		return false
	}
	if c := f.conn.Load(); c != nil {
		if o := c.Other(f); o != nil && o != f {
			return t.Remove(o)
		}
	}
	return false
}

// Remove removes f from the table if it is still there.
func (t *FlowTable) Remove(f *Flow) bool {
	s := t.shardOf(f.hash)
	s.mu.Lock()
	ok := s.findLocked(&f.key, f.hash) == f
	if ok {
		t.deleteLocked(s, f)
		t.shrinkLocked(s)
	}
	s.mu.Unlock()
	return ok
}

// replaceReply inserts rf, the reply flow of fwd's connection, in place of
// got, a flow that holds its key (the reply raced the connection, a
// stateless one from before, or a flow of another connection), and returns
// rf, or nil if the table is full. The other direction of got's connection
// goes too (unless it is fwd), or it would go on translating for a
// connection whose state is released.
func (t *FlowTable) replaceReply(got, rf, fwd *Flow) *Flow {
	t.Remove(got)
	if oc := got.conn.Load(); oc != nil {
		if o := oc.Other(got); o != nil && o != got && o != fwd {
			t.Remove(o)
		}
	}
	return t.insertReply(rf)
}

// origin returns the stateful connection f is the origin of, or nil.
func (f *Flow) origin() *Conn {
	if c := f.conn.Load(); c != nil && c.Stateful && c.fwd.Load() == f {
		return c
	}
	return nil
}

// RemoveConn removes f and the other direction of its connection.
func (t *FlowTable) RemoveConn(f *Flow) {
	t.Remove(f)
	t.dropPartner(f)
}

// Pair makes fwd and rev the two directions of one connection. If either
// already belongs to a connection, that one is kept (and returned) unless it
// already has both directions.
func (t *FlowTable) Pair(fwd, rev *Flow, stateful bool, now int64) *Conn {
	c := fwd.conn.Load()
	if c == nil {
		c = &Conn{Stateful: stateful, Created: now}
		c.fwd.Store(fwd)
		if !fwd.conn.CompareAndSwap(nil, c) {
			c = fwd.conn.Load()
		}
	}
	if c.rev.CompareAndSwap(nil, rev) || c.rev.Load() == rev {
		rev.conn.Store(c)
	}
	// The pair may be replied, or hold the other's RST, now.
	t.touch(fwd)
	t.touch(rev)
	return c
}

// AttachConn makes f the origin of a new connection with no reply flow yet.
func (t *FlowTable) AttachConn(f *Flow, stateful bool, now int64, origin Origin, state any) *Conn {
	return t.attachConn(new(Conn), f, stateful, now, origin, state)
}

// attachConn is AttachConn with c, a zero Conn, as the connection.
func (t *FlowTable) attachConn(c *Conn, f *Flow, stateful bool, now int64, origin Origin, state any) *Conn {
	c.Stateful, c.Created, c.State = stateful, now, state
	if origin != (Origin{}) {
		c.Origin = new(Origin)
		*c.Origin = origin
	}
	c.fwd.Store(f)
	f.conn.Store(c)
	if f.Removed() {
		// f left the table meanwhile (evicted by another worker): the
		// table will not see this connection go.
		c.release()
	}
	return c
}

type timeoutKind uint8

const (
	tmoTCPEstablished timeoutKind = iota
	tmoTCPHalfOpen
	tmoTCPTransitory
	tmoTCPTimeWait
	tmoTCPClosed
	tmoUDP
	tmoUDPUnreplied
	tmoICMP
	tmoOther
	numTimeoutKinds
)

// connLastSeen returns the last time either direction of f's connection saw
// a packet.
func connLastSeen(f *Flow) int64 {
	seen := f.lastSeen.Load()
	if c := f.conn.Load(); c != nil {
		if o := c.Other(f); o != nil {
			seen = max(seen, o.lastSeen.Load())
		}
	}
	return seen
}

// timeoutOf returns the idle timeout that applies to f's connection now.
func (t *FlowTable) timeoutOf(f *Flow) int64 {
	var other *Flow
	if c := f.conn.Load(); c != nil {
		if o := c.Other(f); o != f {
			other = o
		}
	}
	switch f.key.Proto {
	case ProtoTCP:
		mine := uint8(f.state.Load())
		var theirs uint8
		if other != nil {
			theirs = uint8(other.state.Load())
		}
		switch {
		case (mine|theirs)&TCPRst != 0:
			return t.tmo[tmoTCPClosed]
		case mine&theirs&TCPFin != 0:
			return t.tmo[tmoTCPTimeWait]
		case (mine|theirs)&TCPFin != 0:
			return t.tmo[tmoTCPTransitory]
		case halfOpen(f, mine, theirs, other):
			return t.tmo[tmoTCPHalfOpen]
		}
		return t.tmo[tmoTCPEstablished]
	case ProtoUDP:
		if replied(f, other) {
			return t.tmo[tmoUDP]
		}
		return t.tmo[tmoUDPUnreplied]
	case ProtoICMPv4, ProtoICMPv6:
		return t.tmo[tmoICMP]
	}
	return t.tmo[tmoOther]
}

// handshaken reports whether both directions of a TCP connection, whose
// flags seen are mine and theirs (other its partner flow, nil if none),
// have sent an ACK: the origin's SYN has none, so a connection whose
// origin sent nothing but SYNs (a spoofed SYN flood, answered or not) has
// not completed its handshake.
func handshaken(mine, theirs uint8, other *Flow) bool {
	return other != nil && mine&theirs&TCPAck != 0
}

// halfOpen reports whether TCP flow f, whose connection's flags seen are
// mine and theirs (other its partner flow, nil if none), is timed and
// early-dropped as half-open: a SYN seen and the handshake not complete,
// or a connection taken up mid-stream (by a bare ACK) that the other end
// has not answered with an ACK yet. Linux conntrack keeps such a pickup
// unassured, early-droppable, until it sees a reply; a flood of spoofed
// bare ACKs must not hold the table for the established timeout. A flow
// of no connection (cached without state) that saw no SYN is not.
func halfOpen(f *Flow, mine, theirs uint8, other *Flow) bool {
	switch seen := mine | theirs; {
	case handshaken(mine, theirs, other):
		return false
	case seen&TCPSyn != 0:
		return true
	default: // taken up mid-stream
		return seen&TCPAck != 0 && f.conn.Load() != nil
	}
}

// unassured reports whether f's connection may be early-dropped: a TCP
// connection that is half-open (halfOpen: its handshake not complete, or
// taken up mid-stream and not answered yet), or one of another protocol
// never answered.
func unassured(f *Flow) bool {
	var other *Flow
	if c := f.conn.Load(); c != nil {
		if o := c.Other(f); o != f {
			other = o
		}
	}
	if f.key.Proto != ProtoTCP {
		return !replied(f, other)
	}
	mine := uint8(f.state.Load())
	var theirs uint8
	if other != nil {
		theirs = uint8(other.state.Load())
	}
	return halfOpen(f, mine, theirs, other)
}

// replied reports whether both directions of a connection, f and its
// partner other, have seen packets. Both directions must agree on it, or
// one would outlive the other.
func replied(f, other *Flow) bool {
	return other != nil && f.packets.Load() > 0 && other.packets.Load() > 0
}

// Expired reports whether f's connection has been idle past its timeout at
// time now.
func (t *FlowTable) Expired(f *Flow, now int64) bool {
	if now-f.lastSeen.Load() <= t.minTmo {
		return false // seen more recently than any timeout
	}
	return now-connLastSeen(f) > t.timeoutOf(f)
}

// Expire removes every flow whose connection has been idle past its timeout
// at time now, and returns how many it removed. Its work is in proportion
// to the flows whose wheel slots came due (see wheel), not to the table.
func (t *FlowTable) Expire(now int64) int {
	t.expireMu.Lock()
	defer t.expireMu.Unlock()
	touched, lost := t.drain(t.touched)
	gone := t.gone[:0]
	n, j := 0, 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		if lost {
			t.rebuildLocked(s)
		}
		for ; j < len(touched) && touched[j].hash&t.mask == uint32(i); j++ {
			t.refileLocked(s, touched[j])
		}
		gone = t.expireLocked(s, now, gone)
		t.shrinkLocked(s)
		s.mu.Unlock()
		// Partners expire with them: both directions share the idle time.
		k := len(gone)
		for _, f := range gone {
			if t.dropPartner(f) {
				k++
			}
		}
		n += k
		t.expired.Add(uint64(k))
		clear(gone)
		gone = gone[:0]
	}
	clear(touched)
	t.touched, t.gone = touched[:0], gone
	return n
}

// Range calls fn for every flow until fn returns false. The flows seen are
// a snapshot per shard; fn must not call back into the table.
func (t *FlowTable) Range(fn func(*Flow) bool) {
	var buf []*Flow
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, f := range s.m {
			for ; f != nil; f = f.next {
				buf = append(buf, f)
			}
		}
		s.mu.RUnlock()
		for _, f := range buf {
			if !fn(f) {
				return
			}
		}
		buf = buf[:0]
	}
}

// Flush removes every flow.
func (t *FlowTable) Flush() {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, f := range s.m {
			for f != nil {
				next := f.next
				t.deleteLocked(s, f)
				f = next
			}
		}
		s.m, s.peak, s.w = make(map[uint32]*Flow), 0, wheel{}
		s.mu.Unlock()
	}
}
