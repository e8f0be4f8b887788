// Package inspect holds what the switch reports about itself, as plain
// values with their JSON form: ports and their devices, layers with their
// rules and counters, flows and the filter that selects them, switch-wide
// statistics, a packet trace's request and result, and a capture's
// options. The engine (package vswitch) fills them in; ufpd sends them;
// ufpctl and other clients read them through package api without linking
// the engine.
//
// It imports vfp (for its address checks) and the standard library.
package inspect
