package rules

import "github.com/ufp-dev/ufp/dataplane"

// StatefulAction is the part of a rule's action that keeps state per
// connection: source NAT (package nat) and load balancing (package lb)
// are two. The engine calls it, through this interface alone, when a
// packet crosses the rule on the slow path, after the rule's own header
// transposition; it names no kind of stateful action, so a new kind needs
// no change to the engine. Implementations are immutable values of a
// compiled policy, safe for concurrent use.
type StatefulAction interface {
	// Translate makes the transposition of the connection that the packet
	// d.View() describes opens, composes it into the decision with
	// d.Transpose, and gives what the connection must keep (a NAT
	// binding, a chosen backend) to d.Hold, a part that is the
	// connection's alone. When the pipeline re-decides an established
	// connection (d.Revalidating), it finds the state the connection kept
	// with d.Prior and says whether it still holds: it keeps it, or fails
	// with dataplane.DropRevalidated; it never moves the connection to new
	// state. A dry decision (d.Dry(), a trace) changes nothing outside d:
	// it tells what a real one would do. at is where the rule is. It
	// reports false, with d.Drop set, when the packet goes nowhere.
	Translate(d *dataplane.Decision, at Site) bool
	// String describes the action for listings, e.g. "snat 192.168.1.10"
	// or "lb svc/tcp/80 (routed)".
	String() string
}

// Site is where a rule sits, as far as a stateful action needs to know:
// on which kind of port.
type Site struct {
	// Uplink: the rule is on the switch's uplink port.
	Uplink bool
	// Host: the rule is on the host's own vNIC, whose connections are the
	// host stack's.
	Host bool
}
