// Command ufp-replay runs packets from a pcapng through a ufp switch
// offline: each packet enters on the port its capture interface is named
// after; every frame the switch emits is written to an output pcapng on the
// interface of the port it left by, with a readable per-packet trace of the
// layers, rules, transpositions and paths that decided it.
//
//	ufp-replay                                   # the embedded quickstart scenario
//	ufp-replay -policy P.json -in in.pcapng -out out.pcapng -trace trace.txt
//	ufp-replay -check testdata/scenarios/l2-pod-to-pod   # compare with golden files
//
// A scenario directory holds policy.json, in.pcapng, the golden want.pcapng
// and want-trace.txt, and optionally policy@N.json files: policies applied
// before packet N. -check DIR runs the scenario (or the -policy and -in
// given) and exits 1 with a diff if the output differs from DIR's golden
// files; -update rewrites them instead.
package main
