// Package dataplane is ufp's packet core: packet buffers with headroom and
// offload metadata, zero-allocation header parsing, packed flow keys, header
// transpositions (HT) and their composition, incremental checksums, the
// unified flow table (UFT) and the pipeline executor that runs a batch
// through the fast path and hands misses to a slow path; the tracking of
// fragmented datagrams by which later IP fragments follow their first
// fragment's verdict (fragtrack.go); at the egress, software GSO and IPv4
// fragmentation of packets over an MTU, and the ICMP errors about an MTU
// that a router sends.
//
// The package imports nothing outside the standard library. Nothing here
// allocates per packet on the fast path; slow-path work (a UFT miss) may.
package dataplane
