package vswitch

import (
	"net/netip"

	"github.com/ufp-dev/ufp/lb"
	"github.com/ufp-dev/ufp/nat"
)

// connState is a connection's state as the tests read it: the backend it
// was balanced to (lb), and the source NAT binding it holds (nat), through
// a snat action or its load balancer's SourceVIP.
type connState struct {
	lb  *pickView
	nat *nat.Binding
}

// pickView is a connection's lb.Pick.
type pickView struct {
	lb      string
	backend netip.Addr
	srcPort uint16
	tuple   lb.Tuple
	reg     *struct{} // not nil while the pick holds its tuple's registration
}

// stateOf reads the state st (a Conn's State) the stateful actions left;
// false if it holds none.
func stateOf(st any) (*connState, bool) {
	if pk, b, ok := lb.ConnPick(st); ok {
		v := &pickView{lb: pk.Balancer(), backend: pk.Backend(), srcPort: pk.SrcPort()}
		var reg bool
		if v.tuple, reg = pk.Tuple(); reg {
			v.reg = &struct{}{}
		}
		return &connState{lb: v, nat: b}, true
	}
	if b := nat.ConnBinding(st); b != nil {
		return &connState{nat: b}, true
	}
	return nil, false
}
