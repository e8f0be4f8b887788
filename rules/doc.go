// Package rules holds ufp's match-action tables: layers, groups of rules,
// conditions and actions, and the classifier that finds the rule that
// applies to a packet.
//
// # Semantics
//
// A port's pipeline is an ordered list of layers. A packet entering the
// switch through a port (Out: a pod sending, or the uplink receiving from
// the network) crosses that port's layers first to last; a packet leaving
// the switch through a port (In: towards the pod, or out to the network)
// crosses them last to first. Each layer yields exactly one action for the
// packet:
//
//  1. The layer's groups are evaluated in order. A group whose own
//     conditions do not match the packet is skipped.
//  2. Within a group, the matching rule with the smallest priority number
//     applies (priorities are unique within a group, so this is
//     deterministic). Other matching rules of the group are ignored.
//  3. If that rule is terminating, the layer's evaluation ends with it.
//     Otherwise evaluation goes on with the next group, and a match in a
//     later group overrides it: the last match wins.
//  4. If no group yields a rule, the layer's default action for the
//     packet's direction applies.
//
// A block action ends the packet's way through the switch. An allow action
// may carry a header transposition, which is applied before the next layer
// looks at the packet, so later layers match on the rewritten headers.
// A stateful rule makes the whole connection stateful: its reply direction
// is installed from the origin's decision and does not cross the layers.
//
// Policies are immutable once compiled; the switch swaps them atomically.
//
// A group may be shared (Shared, NewShared): compiled once, with its
// rules, their counters and its classifier, and taken by reference by
// every layer that has it (the load balancers every pod's NAT layer
// holds). Each layer still names its own group and keeps its own verdict
// cache; a shared rule's counters count for every layer together.
//
// It imports dataplane only. The stateful actions it calls (StatefulAction)
// live in the packages of their features (nat, lb).
package rules
