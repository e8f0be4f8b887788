// Command e2e measures pod-to-pod performance through ufpd and, on the
// same topologies, through the kernel (a Linux bridge) and Open vSwitch's
// userspace datapath, and compares them.
//
//	sudo go run ./bench/e2e [-switches ufpd,bridge,ovs-tap,ovs-tso,ovs-afxdp]
//	    [-topology pair|overlay|both] [-rounds 3] [-t 5] [-md FILE] [-v]
//
// Topology pair puts pod A, the switch and pod B on one node; topology
// overlay puts pod A on node 1 and pod B on node 2, each node with its own
// switch, joined by VXLAN (VNI 4096, UDP 4789) over an underlay veth. For
// each switch under test it builds the pods' and nodes' namespaces, all
// named ufpb-<run id>-..., with no route out of them. ufpd is built with
// `go build` into a temporary directory and run as child processes on
// generated configurations (ufpd-policy.json: an Overlay network, the
// pods' endpoints with OutBoundNAT exceptions and ACLs). Open vSwitch runs
// as child processes too (ovsdb-server and ovs-vswitchd per node), each
// in a private run directory with its own database.
//
// Rounds are interleaved (A, B, C, ..., A, B, C, ...). Each round
// measures, from pod A to pod B: ping latency, iperf3 TCP with 1 and 4
// streams, and 64-byte UDP frames delivered per second, counted at pod B's
// interface, with the switch's CPU time per delivered frame (the
// processes' utime+stime; the kernel's is not measured). The medians, and
// the ratios of ufpd's to each other switch's, go to standard output and,
// with -md, to a Markdown file.
//
// Everything the harness makes (namespaces, processes, files) is removed at
// the end, also after an error or on SIGINT or SIGTERM. Processes are
// stopped by their PID, and namespaces deleted by their exact names.
package main
