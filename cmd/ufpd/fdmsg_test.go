package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestFdMsgRoundTrip(t *testing.T) {
	for _, m := range []fdMsg{
		{Op: opPut, Port: "pod-a", Type: fdTypeTAP, Name: "eth0", NetNS: "/var/run/netns/pod-a"},
		{Op: opPut, Port: "uplink", Type: fdTypeAFPacket, Name: "eth0"},
		{Op: opHeld, Port: "pod-ü", Type: fdTypeTAP, Name: "eth0", NetNS: strings.Repeat("n", fdMsgLong)},
		{Op: opHeld, Port: "api", Type: fdTypeListener},
		{Op: opDrop, Port: "pod-a"},
		{Op: opList},
		{Op: opEnd},
		{Op: opQuit},
		{Op: opReady},
		{Op: opGo, Type: fdTypeConns},
		{Op: opServing},
		{Op: opFailed, Text: "port pod-a: tap eth0: gone"},
	} {
		b, err := appendFdMsg(nil, m)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		got, err := decodeFdMsg(b)
		if err != nil {
			t.Fatalf("%+v: decode: %v", m, err)
		}
		if got != m {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestFdMsgRejects(t *testing.T) {
	good, err := appendFdMsg(nil, fdMsg{Op: opPut, Port: "p", Type: fdTypeTAP, Name: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"version", edit(func(b []byte) []byte { b[4] = 2; return b })},
		{"op zero", edit(func(b []byte) []byte { b[5] = 0; return b })},
		{"op unknown", edit(func(b []byte) []byte { b[5] = byte(opLast) + 1; return b })},
		{"descriptor count", edit(func(b []byte) []byte { b[6] = 0; return b })},
		{"flags", edit(func(b []byte) []byte { b[7] = 1; return b })},
		{"short", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"port length past the end", edit(func(b []byte) []byte { b[fdMsgHeader] = 200; return b })},
		{"control character", edit(func(b []byte) []byte { b[fdMsgHeader+1] = '\n'; return b })},
	} {
		if _, err := decodeFdMsg(tc.b); !errors.Is(err, errFdMsg) {
			t.Errorf("%s: decode %x: err %v, want errFdMsg", tc.name, tc.b, err)
		}
	}
	for _, m := range []fdMsg{
		{Op: opPut, Type: fdTypeTAP, Name: "eth0"},                              // no port
		{Op: opPut, Port: "p", Type: "veth", Name: "eth0"},                      // type
		{Op: opPut, Port: "p", Type: fdTypeTAP},                                 // no interface
		{Op: opPut, Port: "api", Type: fdTypeListener},                          // listeners only go to a successor
		{Op: opDrop, Port: "p", Name: "eth0"},                                   // drop describes nothing
		{Op: opList, Port: "p"},                                                 // list has no port
		{Op: opGo},                                                              // go carries the connections
		{Op: opReady, Text: "x"},                                                // text only on failed
		{Op: opPut, Port: strings.Repeat("p", 256), Type: fdTypeTAP, Name: "e"}, // too long
		{Op: opFailed, Text: "bad \xff utf-8"},
	} {
		if b, err := appendFdMsg(nil, m); !errors.Is(err, errFdMsg) {
			t.Errorf("%+v: encoded as %x (err %v), want errFdMsg", m, b, err)
		}
	}
}

// FuzzFdMsg: decoding never panics, and what decodes encodes to the same
// bytes.
func FuzzFdMsg(f *testing.F) {
	for _, m := range []fdMsg{
		{Op: opPut, Port: "pod-a", Type: fdTypeTAP, Name: "eth0", NetNS: "pod-a"},
		{Op: opHeld, Port: "metrics", Type: fdTypeListener},
		{Op: opGo, Type: fdTypeConns},
		{Op: opFailed, Text: "why"},
		{Op: opList},
	} {
		b, err := appendFdMsg(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeFdMsg(b)
		if err != nil {
			if !errors.Is(err, errFdMsg) {
				t.Fatalf("error %v does not wrap errFdMsg", err)
			}
			return
		}
		again, err := appendFdMsg(nil, m)
		if err != nil {
			t.Fatalf("%+v decoded but does not encode: %v", m, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, m, again)
		}
	})
}
