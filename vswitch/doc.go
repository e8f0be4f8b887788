// Package vswitch is the engine: the switch's ports and their compiled
// layers, the forwarding tables, the slow path that runs a packet through
// the source port's layers, the switching decision and the destination
// port's layers (calling stateful actions through rules.StatefulAction,
// naming none), ARP and neighbour discovery, serving devices, and what the
// switch reports of itself (ports, layers, flows, counters, traces,
// captures). It compiles a policy document (Config: the VFP level of
// package vfp, or the HNS level of package hns, lowered first) into an
// immutable policy it swaps in atomically.
//
// It imports dataplane, rules, nat, lb, vfp, hns, inspect and device.
package vswitch
