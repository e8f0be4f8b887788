package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Endpoint names. An endpoint ufp-cni makes is named
//
//	cni-NNNNNN-AAAAAAAAAAAA
//
// NNNNNN: the first 6 hex digits of SHA-256 of the conf's name (the CNI
// network), which scopes GC to the endpoints of one configuration;
// AAAAAAAAAAAA: the first 12 hex digits of SHA-256 of the container ID
// and the interface name, the attachment. The name is stable (DEL, CHECK
// and GC find it again from the same three strings), short (23 bytes),
// and made of characters that are valid everywhere ufpd shows a port
// name.
const (
	endpointPrefix = "cni-"
	netTagLen      = 6
	attachTagLen   = 12
	endpointLen    = len(endpointPrefix) + netTagLen + 1 + attachTagLen
)

// endpointName returns the name of the endpoint of container containerID's
// interface ifName attached by the conf named confName.
func endpointName(confName, containerID, ifName string) string {
	return endpointPrefix + netTag(confName) + "-" + hashHex(containerID+"\x00"+ifName, attachTagLen)
}

// netTag is the part of endpoint names that names the conf.
func netTag(confName string) string { return hashHex(confName, netTagLen) }

func hashHex(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

// isConfEndpoint reports whether name is that of an endpoint ufp-cni made
// for the conf named confName.
func isConfEndpoint(name, confName string) bool {
	if len(name) != endpointLen || !strings.HasPrefix(name, endpointPrefix+netTag(confName)+"-") {
		return false
	}
	for _, c := range name[len(endpointPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// parseMACPrefix parses endpointMacPrefix: two bytes written "0E-2A" (as
// win-overlay writes it) or "0e:2a"; "" is win-overlay's default 0E-2A, a
// locally administered unicast prefix. The prefix must be unicast (the
// low bit of the first byte clear).
func parseMACPrefix(s string) ([2]byte, error) {
	if s == "" {
		return [2]byte{0x0e, 0x2a}, nil
	}
	var p [2]byte
	if len(s) != 5 || (s[2] != '-' && s[2] != ':') {
		return p, fmt.Errorf("%q is not two bytes written xx-xx (e.g. 0E-2A)", s)
	}
	for i, h := range []string{s[:2], s[3:]} {
		b, err := hex.DecodeString(h)
		if err != nil {
			return p, fmt.Errorf("%q is not two bytes written xx-xx (e.g. 0E-2A)", s)
		}
		p[i] = b[0]
	}
	if p[0]&1 != 0 {
		return p, fmt.Errorf("%q is a multicast prefix (the first byte's low bit is set)", s)
	}
	return p, nil
}

// endpointMAC derives an endpoint's MAC from its addresses as win-overlay
// does: the prefix and the four bytes of the first IPv4 address; an
// endpoint with IPv6 addresses only gets the last four bytes of its first
// one. Addresses are unique in a network, so the MACs are too.
func endpointMAC(prefix [2]byte, addrs []netip.Addr) (net.HardwareAddr, error) {
	var tail []byte
	for _, a := range addrs {
		if a.Is4() {
			b := a.As4()
			tail = b[:]
			break
		}
	}
	if tail == nil {
		for _, a := range addrs {
			b := a.As16()
			tail = b[12:]
			break
		}
	}
	if tail == nil {
		return nil, fmt.Errorf("no address to derive the MAC from")
	}
	return net.HardwareAddr{prefix[0], prefix[1], tail[0], tail[1], tail[2], tail[3]}, nil
}
