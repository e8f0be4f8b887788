// Command ufpd is the ufp vswitch daemon: it runs a switch on real devices
// (pods' TAP interfaces, L3 TUN or Wintun ports, the host's own vNIC, the
// uplink on an existing interface through AF_PACKET) under a policy of
// networks, endpoints, load balancers, routes to other nodes' pod subnets
// and ACLs.
//
//	ufpd -config /etc/ufp/ufpd.json    # run; SIGHUP reloads, SIGTERM stops
//	ufpd -check -config FILE           # validate a configuration and exit
//	ufpd -show-state STATE             # print the state a start would restore and exit
//	ufpd demo                          # two pods and a node through ufpd, with root
//
// The configuration file holds the policy document and the devices of its
// ports (see docs/UFPD.md). On SIGHUP ufpd reads the file again, compiles
// the new policy and swaps it in atomically; an invalid file is rejected
// with an error naming the field and the running policy stays. On SIGTERM
// or SIGINT it stops, removing the interfaces it made.
//
// With a state file, ufpd starts a descriptor holder (`ufpd fdholder`, a
// process of its own that only keeps duplicates of the TAPs' and the
// AF_PACKET uplink's descriptors): after a crash, the pods keep their
// carrier and the next ufpd adopts the devices from it. On SIGUSR2 (or
// POST /v1/restart) ufpd restarts gracefully: it starts its successor,
// hands it the devices, the listeners and the connections, stops reading
// at a frame boundary once the successor is ready, and exits when it
// serves (docs/UFPD.md, "Restarts").
package main
