// Command ufpctl is ufpd's command-line client: it reads and changes the
// running switch through ufpd's control API on its Unix socket.
//
//	ufpctl [-s SOCKET] [-o table|json] COMMAND [ARGS]
//
//	ufpctl status                                  # the daemon: generation, revision, ports
//	ufpctl networks | endpoints | lbs              # the HNS objects, one line each
//	ufpctl network NAME | endpoint NAME | lb NAME  # one object in detail
//	ufpctl create network|endpoint|lb -f FILE      # JSON from FILE (- for standard input)
//	ufpctl update network|endpoint|lb [NAME] -f FILE
//	ufpctl delete network|endpoint|lb NAME
//	ufpctl batch -f FILE                           # a batch of one owner's objects (docs/API.md, "Batches")
//	ufpctl ports                                   # the switch's ports and their devices
//	ufpctl layers PORT                             # a port's layers, groups and rules, with counters
//	ufpctl rules [PORT]                            # the same rules as one flat table
//	ufpctl flows [flush] [-port P] [-proto P] [-src A|PFX] [-dst A|PFX] [-sport N] [-dport N] [-limit N]
//	ufpctl counters                                # switch totals, drops, flow table, NAT pools, ports
//	ufpctl trace PORT PROTO SRC[:PORT] DST[:PORT] [-flags S] [-icmp-type N] [-icmp-code N]
//	       [-src-mac M] [-dst-mac M] [-vxlan 'OUTERSRC[>OUTERDST]/VNI'] [-length N]
//	ufpctl capture PORT -w FILE.pcapng [-c COUNT] [-snaplen N] [-direction in|out] [-t DURATION]
//
// The socket is -s, else $UFPCTL_SOCKET, else /run/ufp/ufpd.sock. Tables
// are the default output; -o json prints the API's objects as JSON,
// indented. Flags may follow a command's arguments, and -s and -o may
// follow the command too. IPv6 addresses with a port are written
// [addr]:port.
//
// trace asks the switch what it would do with a packet, without sending
// it: the layers it crosses, the rule that decided each, the switching
// decision, the header changes and the verdict, naming the rule that
// dropped it if one did:
//
//	ufpctl trace pod-a tcp 10.244.1.10:40000 10.244.1.11:22
//
// capture streams a port's frames as pcapng to a file, or to standard
// output with -w - (ufpctl capture pod-a -w - | tshark -r -), until
// interrupted, COUNT frames or DURATION.
//
// An error from ufpd is printed as "ufpctl: MESSAGE" with exit status 1;
// a usage error exits with status 2.
package main
