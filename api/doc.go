// Package api is ufpd's control API: the objects it serves over HTTP on a
// Unix socket (JSON bodies) and a Go client for them, which ufpctl and
// ufp-cni use. docs/API.md describes every call.
//
// The objects are HNS-level, as Windows' Host Networking Service names
// them: networks, endpoints (a pod's vNIC and the device that backs it),
// load balancers (Services) and the policies of endpoints; and ufp's own
// objects that a program owns beside them: routes to other nodes' pod
// subnets, written in batches (Batch.Routes). Each change is
// validated, compiled and swapped in atomically by ufpd; one that is
// invalid is refused with an error naming the object and the field, and
// the running policy stays. Around them the API reads the compiled switch:
// ports, layers, rules and their counters, flows, statistics, a packet
// trace and live captures.
//
// It imports hns (the objects) and inspect (the switch's reports) and the
// standard library: a client links neither the engine nor its devices.
package api
