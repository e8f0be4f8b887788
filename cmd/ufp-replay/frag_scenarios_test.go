package main

import (
	"encoding/binary"
	"maps"
	"strings"
	"time"

	"github.com/ufp-dev/ufp/capture"
	"github.com/ufp-dev/ufp/dataplane"
)

// Inputs of the fragment scenarios: datagrams cut into IP fragments that
// cross every stateful layer, in order and with later fragments first.

func init() { maps.Copy(scenarios, fragScenarios) }

// fragments cuts the unfragmented Ethernet frame (IPv4, or IPv6 without
// extension headers) into fragments of datagram id carrying chunk bytes
// of its IP payload each (the last: what is left), in order. IPv6
// fragments get a Fragment header after the fixed header.
func fragments(frame []byte, id uint32, chunk int) [][]byte {
	const l2 = 14
	var out [][]byte
	if frame[l2]>>4 == 4 {
		hl := int(frame[l2]&0xf) * 4
		hdr, data := frame[:l2+hl], frame[l2+hl:]
		for off := 0; off < len(data); off += chunk {
			end := min(off+chunk, len(data))
			f := append(append([]byte{}, hdr...), data[off:end]...)
			binary.BigEndian.PutUint16(f[l2+2:], uint16(hl+end-off))
			binary.BigEndian.PutUint16(f[l2+4:], uint16(id))
			fo := uint16(off / 8)
			if end < len(data) {
				fo |= 0x2000 // more fragments
			}
			binary.BigEndian.PutUint16(f[l2+6:], fo)
			out = append(out, fixIPv4Checksum(f))
		}
		return out
	}
	hdr, data := frame[:l2+40], frame[l2+40:]
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		fh := make([]byte, 8)
		fh[0] = hdr[l2+6]
		om := uint16(off)
		if end < len(data) {
			om |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], om)
		binary.BigEndian.PutUint32(fh[4:], id)
		f := append(append(append([]byte{}, hdr...), fh...), data[off:end]...)
		f[l2+6] = dataplane.ProtoFragment
		binary.BigEndian.PutUint16(f[l2+4:], uint16(8+end-off))
		out = append(out, f)
	}
	return out
}

// fragPayload is n bytes of text, so that the payload reads in a capture.
func fragPayload(what string, n int) string {
	return strings.Repeat(what+" ", n/(len(what)+1)+1)[:n]
}

var fragScenarios = map[string]func() []capture.Frame{
	// Fragmented UDP through every stateful layer of pod-a's port and
	// the switch (testdata/scenarios/fragments/policy.json): source NAT
	// to the Internet and the answer back, a ClusterIP Service (IPv4 and
	// IPv6) and its backend's answer, a stateful ACL that blocks the
	// first fragment, the VXLAN overlay both ways. Each datagram's first
	// fragment is decided by the layers (or the cached flow); its later
	// fragments follow it: the same output port, addresses and tunnel,
	// their own ports untouched (they have none: the translated ports and
	// the checksum of the whole datagram are in the first fragment).
	// Later fragments that come first wait for it and leave after it
	// ("released"). A duplicated fragment (an overlap) drops the rest of
	// its datagram; a fragment whose first fragment never comes is
	// dropped when its second has passed.
	"fragments": func() []capture.Frame {
		var s seq
		a, b, far, host, remote := "10.244.0.10", "10.244.0.11", natFar, natHost, "10.244.1.5"
		a6, vip6 := "fd00:244::10", "fd00:96::53"
		add := func(port string, frags [][]byte, order ...int) {
			for _, i := range order {
				s.add(port, frags[i])
			}
		}
		// Source NAT: pod-a to the Internet, in order; the answer with
		// its later fragments first.
		add("pod-a", fragments(udp(macA, macDR, a, 41000, far, 5000, fragPayload("request", 2400)), 0x101, 1200), 0, 1, 2)
		add("uplink", fragments(udp(macRouter, macUp, far, 5000, host, 41000, fragPayload("answer", 2400)), 0x201, 1200), 2, 1, 0)
		// The Service: pod-a to the VIP, the later fragment first; the
		// backend's answer in order, translated back from the VIP.
		add("pod-a", fragments(udp(macA, macDR, a, 41001, "10.96.0.53", 53, fragPayload("query", 2000)), 0x102, 1200), 1, 0)
		add("pod-b", fragments(udp(macB, macDR, b, 5353, a, 41001, fragPayload("response", 2000)), 0x202, 1200), 0, 1)
		// IPv6 to the Service, in reverse, then the answer.
		add("pod-a", fragments(udp(macA, macDR, a6, 41002, vip6, 53, fragPayload("query6", 3000)), 0x103, 1200), 2, 1, 0)
		add("pod-b", fragments(udp(macB, macDR, "fd00:244::11", 5353, a6, 41002, fragPayload("response6", 3000)), 0x203, 1200), 0, 2, 1)
		// The ACL blocks syslog: no fragment leaves, held or not.
		add("pod-a", fragments(udp(macA, macDR, a, 41003, far, 514, fragPayload("syslog", 2400)), 0x104, 1200), 2, 0, 1)
		// The overlay: to a remote pod, pushed into VXLAN with one outer
		// source port; and from it, popped.
		add("pod-a", fragments(udp(macA, macDR, a, 41004, remote, 7000, fragPayload("to-remote", 2400)), 0x105, 1200), 1, 0, 2)
		for _, i := range []int{1, 0} {
			s.add("uplink", lbFromRemote(fragments(udp(macRemoteDR, macDR, remote, 41005, b, 7000, fragPayload("from-remote", 2000)), 0x205, 1200)[i]))
		}
		// A fragment duplicated: the datagram goes no further.
		dup := fragments(udp(macA, macDR, a, 41000, far, 5000, fragPayload("again", 3600)), 0x106, 1200)
		add("pod-a", dup, 0, 1, 1, 2)
		// A later fragment whose first never comes, then a datagram
		// after its time ran out.
		lone := fragments(udp(macA, macDR, a, 41000, far, 5000, fragPayload("lost", 2400)), 0x107, 1200)
		s.add("pod-a", lone[2])
		s.addAt(s.at+1500*time.Millisecond, "pod-a", udp(macA, macDR, a, 41000, far, 5000, "after"))
		return s.frames
	},
}
