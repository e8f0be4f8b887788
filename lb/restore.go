package lb

import (
	"fmt"
	"net/netip"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/nat"
)

// What a restarted switch needs of load balancing to carry on its
// predecessor's balanced connections: each one's pick (load balancer,
// backend, moved source port), its tuple as the backend sees it,
// registered again, and its SourceVIP binding, made again on its port.

// ConnChoice is a balanced connection's part of its state as a
// restarted switch needs it.
type ConnChoice struct {
	LB      string
	Backend netip.Addr
	// SrcPort, when not 0, is the source port the connection was moved
	// to (Pick.SrcPort).
	SrcPort uint16
	// Tuple is the connection as its backend sees it, registered to
	// Front if Registered (not for a connection without ports).
	Tuple      Tuple
	Registered bool
	Front      netip.AddrPort
	// SourceVIP is the SourceVIP binding the connection holds, if
	// HasSourceVIP.
	SourceVIP    nat.ConnMapping
	HasSourceVIP bool
}

// ChoiceOf returns the choice of part, one part of a connection's state
// (dataplane.StateParts), if it is the part an lb action holds.
func (rt *Runtime) ChoiceOf(part dataplane.Releaser) (ConnChoice, bool) {
	c, ok := part.(*connState)
	if !ok {
		return ConnChoice{}, false
	}
	pk := &c.pick
	ch := ConnChoice{LB: pk.lb, Backend: pk.backend, SrcPort: pk.srcPort}
	// The connection may be released meanwhile (Pick.release): its
	// registration is read under the registry's lock.
	rt.tuples.mu.Lock()
	registered := pk.reg != nil
	f, ok := rt.tuples.m[pk.tuple]
	rt.tuples.mu.Unlock()
	if registered {
		if ok {
			a := netip.AddrFrom16(f.addr)
			if !f.v6 {
				a = a.Unmap()
			}
			ch.Tuple, ch.Registered, ch.Front = pk.tuple.tuple(), true, netip.AddrPortFrom(a, f.port)
		}
	}
	if c.nat != nil {
		ch.SourceVIP, ch.HasSourceVIP = c.nat.Mapping(), true
	}
	return ch, true
}

// RestoreConnState makes ch's state again, for the connection being
// restored (dataplane.Restorer): its tuple registered to its
// frontend (failing if another connection has it), its SourceVIP binding
// bound on its port; and the client's affinity to the backend, if its
// load balancer keeps affinity, renewed at time now. Whether the load
// balancer still has the backend is the decision's to say, as for any
// connection revalidated.
func (rt *Runtime) RestoreConnState(ch ConnChoice, now int64) (dataplane.Releaser, error) {
	st := &connState{pick: Pick{lb: ch.LB, backend: ch.Backend, srcPort: ch.SrcPort}}
	if ch.Registered {
		k, fk := ch.Tuple.key(), frontOf(ch.Front)
		rt.tuples.mu.Lock()
		f, taken := rt.tuples.m[k]
		if !taken {
			rt.tuples.m[k] = fk
		}
		rt.tuples.mu.Unlock()
		if taken && f != fk {
			return nil, fmt.Errorf("lb %s: tuple %v is another connection's", ch.LB, ch.Tuple)
		}
		st.pick.tuple = k
		if !taken {
			st.pick.reg = &rt.tuples
		}
	}
	if ch.HasSourceVIP {
		b, err := rt.nat.BindMapping(ch.SourceVIP)
		if err != nil {
			st.Release()
			return nil, fmt.Errorf("lb %s: sourceVIP: %w", ch.LB, err)
		}
		st.nat = b
	}
	if a := rt.affinity[ch.LB]; a != nil && ch.Registered {
		a.Touch(ch.Tuple.Client.Addr(), ch.Backend, now)
	}
	return st, nil
}
