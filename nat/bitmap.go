package nat

import "math/bits"

// Word patterns selecting ports of one parity: bit i of word w is port
// 64*w+i, and 64 is even, so the parity of a port is the parity of its bit.
const (
	evenPorts = 0x5555555555555555
	oddPorts  = 0xAAAAAAAAAAAAAAAA
	allPorts  = ^uint64(0)
)

func parityPattern(port int) uint64 {
	if port&1 == 0 {
		return evenPorts
	}
	return oddPorts
}

// bitmap has one bit per port, 0-65535.
type bitmap [1024]uint64

func (m *bitmap) has(port int) bool { return m[port>>6]&(1<<(port&63)) != 0 }
func (m *bitmap) set(port int)      { m[port>>6] |= 1 << (port & 63) }
func (m *bitmap) unset(port int)    { m[port>>6] &^= 1 << (port & 63) }

// class is the port space of one protocol class in one pool. Its pool's
// mutex guards it.
type class struct {
	used    bitmap // ports held by live bindings, wherever they lie
	blocked bitmap // reserved ports; always empty for ICMP

	lo, hi   int    // the range new bindings come from
	cursor   int    // where the next-fit search starts, in [lo, hi]
	free     [2]int // ports in [lo, hi] neither used nor blocked, even and odd
	capacity int    // ports in [lo, hi] not blocked
	inUse    int    // live bindings, inside the range or not
}

// scan returns the first port in [from, to] that is neither used nor
// blocked and whose bit is set in pat, or -1. It reads 64 ports a word.
func (c *class) scan(from, to int, pat uint64) int {
	if from > to {
		return -1
	}
	w, last := from>>6, to>>6
	f := ^(c.used[w] | c.blocked[w]) & pat & (allPorts << (from & 63))
	for w < last {
		if f != 0 {
			return w<<6 | bits.TrailingZeros64(f)
		}
		w++
		f = ^(c.used[w] | c.blocked[w]) & pat
	}
	f &= allPorts >> (63 - to&63)
	if f != 0 {
		return w<<6 | bits.TrailingZeros64(f)
	}
	return -1
}

// count returns how many ports in [from, to] have their bit set in both
// pat and the complement of m (m: the ports to exclude).
func count(m *bitmap, from, to int, pat uint64) int {
	if from > to {
		return 0
	}
	w, last := from>>6, to>>6
	f := ^m[w] & pat & (allPorts << (from & 63))
	n := 0
	for w < last {
		n += bits.OnesCount64(f)
		w++
		f = ^m[w] & pat
	}
	return n + bits.OnesCount64(f&(allPorts>>(63-to&63)))
}

// reset sets the class's range to [lo, hi] and recounts what is free in
// it. The caller has set blocked.
func (c *class) reset(lo, hi int) {
	c.lo, c.hi = lo, hi
	if c.cursor < lo || c.cursor > hi {
		c.cursor = lo
	}
	var busy bitmap
	for i := range busy {
		busy[i] = c.used[i] | c.blocked[i]
	}
	c.free[0] = count(&busy, lo, hi, evenPorts)
	c.free[1] = count(&busy, lo, hi, oddPorts)
	c.capacity = count(&c.blocked, lo, hi, allPorts)
}

func (c *class) available(port int) bool {
	return c.lo <= port && port <= c.hi && !c.used.has(port) && !c.blocked.has(port)
}

// search runs the next-fit search for a free port matching pat: from the
// cursor to the range's high end, then from its low end to the cursor.
func (c *class) search(pat uint64) int {
	if p := c.scan(c.cursor, c.hi, pat); p >= 0 {
		return p
	}
	return c.scan(c.lo, c.cursor-1, pat)
}

// pick chooses the port for a new binding whose internal port is want (of
// the host's own endpoint if host: chooseHost), or returns -1 when the
// class is full. See the package comment for the order.
// A port found by the search moves the cursor past it.
func (c *class) pick(want int, parity, host bool) int {
	var p int
	var searched bool
	if host {
		p, searched = c.chooseHost(want, parity)
	} else {
		p, searched = c.choose(want, parity)
	}
	if p >= 0 && searched {
		c.cursor = p + 1
		if c.cursor > c.hi {
			c.cursor = c.lo
		}
	}
	return p
}

// choose is pick without moving the cursor: the port pick would return,
// and whether the search found it (rather than preservation).
func (c *class) choose(want int, parity bool) (port int, searched bool) {
	if c.free[0]+c.free[1] == 0 {
		return -1, false
	}
	if c.available(want) {
		return want, false
	}
	p := -1
	if parity && c.free[want&1] > 0 {
		p = c.search(parityPattern(want))
	}
	if p < 0 {
		p = c.search(allPorts)
	}
	return p, p >= 0 // -1 only if the free counts were wrong
}

// take marks port, which pick returned (or a host's binding keeps outside
// the range or on a reserved port), as held.
func (c *class) take(port int) {
	c.used.set(port)
	if c.lo <= port && port <= c.hi && !c.blocked.has(port) {
		c.free[port&1]--
	}
	c.inUse++
}

// chooseHost is choose for the host's own endpoint (parity: a TCP or UDP
// port, not an ICMP identifier): its port itself wherever it lies, range
// and reservations aside, unless a binding holds it; otherwise what choose
// gives.
func (c *class) chooseHost(want int, parity bool) (port int, searched bool) {
	if (want != 0 || !parity) && !c.used.has(want) { // TCP and UDP have no port 0
		return want, false
	}
	return c.choose(want, parity)
}

// put frees a port a binding held.
func (c *class) put(port int) {
	c.used.unset(port)
	c.inUse--
	if c.lo <= port && port <= c.hi && !c.blocked.has(port) {
		c.free[port&1]++
	}
}
