// Package vfp is the VFP-level policy document: the switch's settings and
// its ports, each with an ordered list of layers made of groups of
// prioritised rules, as Microsoft's Virtual Filtering Platform describes a
// vNIC's policy. It is what a policy file holds at this level, as strict
// JSON (unknown fields, wrong types and trailing data are errors that name
// the field's path), and it compiles the parts that stand alone: a layer
// into a rules.Layer (conditions, actions and header transpositions), the
// flow table's settings and the NAT pools.
//
// The engine (package vswitch) compiles a whole document into a switch's
// policy: ports, forwarding tables, gateways and load balancers. The HNS
// level (package hns) is lowered into this one.
//
// It imports dataplane, rules and nat, and nothing of the engine.
package vfp
