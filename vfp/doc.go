// Package vfp is the VFP-level policy document: the switch's settings and
// its ports, each with an ordered list of layers made of groups of
// prioritised rules, as Microsoft's Virtual Filtering Platform describes a
// vNIC's policy. It is what a policy file holds at this level, as strict
// JSON (unknown fields, wrong types and trailing data are errors that name
// the field's path), and it compiles the parts that stand alone: a layer
// into a rules.Layer (conditions, actions and header transpositions), the
// flow table's settings and the NAT pools.
//
// The document holds values, not text: addresses are netip.Addr, MACs
// dataplane.MAC, a match's prefixes Prefix, protocols Proto, port ranges
// PortRange, enums typed strings (Verb, Direction, ...). Each reads and
// writes itself as the text a policy file has ("10.0.0.0/24", "tcp",
// "1000-2000"), and CheckFields checks that text where the field's path is
// known, so a file's errors name the field. The compilers take the values
// and check what a value can hold that a policy cannot (a missing
// address, a multicast MAC, host bits, an address of the wrong family);
// nothing is parsed again.
//
// The engine (package vswitch) compiles a whole document into a switch's
// policy: ports, forwarding tables, gateways and load balancers. The HNS
// level (package hns) is lowered into this one, as values.
//
// A group that many ports' layers hold alike is written once, in
// switch.sharedGroups, and each layer's group names it (shared): it is
// compiled once per document for the uplink and once for the other ports
// (an action's checks depend on which), and every layer takes the same
// compiled rules (rules.Shared).
//
// It imports dataplane, rules and nat, and nothing of the engine.
package vfp
