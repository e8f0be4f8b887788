package vswitch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// natConns opens, on r's switch (natDoc), a NATed TCP connection from
// ov-a, one from ov-b that needs a port of its own (ov-a holds 5000), and
// a connection through ov-a's port mapping; it returns the external port
// ov-b's connection got.
func natConns(t *testing.T, r *ulRig) uint16 {
	t.Helper()
	a := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 5000, dst: "203.0.113.5", dport: 80, proto: "tcp", flags: "S"}
	r.out("ov-a", natFrame(t, a), "uplink", nil)
	b := a
	b.smac, b.src = natOvB, "10.244.0.11"
	pb := r.out("ov-b", natFrame(t, b), "uplink", nil)
	in := natPkt{smac: natRouter, dmac: natHost, src: "198.51.100.7", sport: 40000, dst: "192.168.1.10", dport: 8080, proto: "tcp", flags: "S"}
	r.out("uplink", natFrame(t, in), "ov-a", nil)
	return srcPort(t, pb.Bytes())
}

func srcPort(t *testing.T, frame []byte) uint16 {
	t.Helper()
	pk := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	tcp, ok := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("not TCP: %v", pk)
	}
	return uint16(tcp.SrcPort)
}

func saveConns(t *testing.T, sw *Switch) []byte {
	t.Helper()
	var buf bytes.Buffer
	st, err := sw.SaveConns(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if st.Conns != 3 || st.Unsupported != 0 {
		t.Fatalf("SaveConns = %+v, want 3 connections", st)
	}
	return buf.Bytes()
}

// A switch that restores its predecessor's connections translates their
// packets as before, in both directions, and gives their NAT ports to no
// other connection.
func TestConnsRestored(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	bPort := natConns(t, r)
	if bPort == 5000 {
		t.Fatalf("ov-b's connection kept port 5000, which ov-a's holds")
	}
	saved := saveConns(t, r.sw)

	r2 := ulNewRig(t, mustParse(t, natDoc))
	st, err := r2.sw.RestoreConns(bytes.NewReader(saved))
	if err != nil {
		t.Fatal(err)
	}
	if st != (ConnsStats{Conns: 3}) {
		t.Fatalf("RestoreConns = %+v, want 3 connections restored", st)
	}
	if n := r2.sw.NAT().Bindings(); n != 2 {
		t.Errorf("NAT bindings after restore = %d, want 2", n)
	}
	// The outside pushes data first, to both NATed connections.
	for _, c := range []struct {
		port    uint16
		to      string
		mac     dataplane.MAC
		private string
	}{{5000, "ov-a", natOvA, "10.244.0.10"}, {bPort, "ov-b", natOvB, "10.244.0.11"}} {
		data := natPkt{smac: natRouter, dmac: natHost, src: "203.0.113.5", sport: 80, dst: "192.168.1.10", dport: c.port, proto: "tcp", flags: "A", payload: "push"}
		back := data
		back.smac, back.dmac, back.dst, back.dport = natDR, c.mac, c.private, 5000
		r2.out("uplink", natFrame(t, data), c.to, natFrame(t, back))
	}
	// The port-mapped connection's pod answers first: from port 8080.
	rep := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: 80, dst: "198.51.100.7", dport: 40000, proto: "tcp", flags: "A", payload: "data"}
	wire := rep
	wire.smac, wire.dmac, wire.src, wire.sport = natHost, natRouter, "192.168.1.10", 8080
	r2.out("ov-a", natFrame(t, rep), "uplink", natFrame(t, wire))

	// A new connection whose internal port is ov-b's external one does
	// not get it: ov-b's connection holds it.
	n := natPkt{smac: natOvA, dmac: natDR, src: "10.244.0.10", sport: bPort, dst: "203.0.113.9", dport: 443, proto: "tcp", flags: "S"}
	pn := r2.out("ov-a", natFrame(t, n), "uplink", nil)
	if got := srcPort(t, pn.Bytes()); got == bPort || got == 5000 {
		t.Errorf("a new connection got port %d, a restored connection's", got)
	}
	// Restored connections age as the others: idle past their timeout,
	// they go with their bindings.
	r2.sw.Pipeline().FlowTable().Expire(r2.sw.Now() + int64(3*3600*1e9))
	if n := r2.sw.NAT().Bindings(); n != 0 {
		t.Errorf("NAT bindings after expiry = %d, want 0", n)
	}
}

// A restore into a table that holds a connection's flow already, or
// under a policy that no longer translates it, restores nothing and
// leaks no binding.
func TestConnsRestoreGone(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	natConns(t, r)
	saved := saveConns(t, r.sw)
	st, err := r.sw.RestoreConns(bytes.NewReader(saved))
	if err != nil {
		t.Fatal(err)
	}
	if st != (ConnsStats{Gone: 3}) {
		t.Errorf("restore into the same switch = %+v, want 3 gone", st)
	}
	if n := r.sw.NAT().Bindings(); n != 2 {
		t.Errorf("NAT bindings = %d, want the 2 of the live connections", n)
	}
}

// Truncation at every byte keeps the records before it; a flipped byte
// costs at most the record it is in (or, in a length, the rest).
func TestConnsTruncatedAndCorrupt(t *testing.T) {
	r := ulNewRig(t, mustParse(t, natDoc))
	natConns(t, r)
	saved := saveConns(t, r.sw)
	var ends []int // where each record ends
	for off := len(connsMagic); off < len(saved); {
		off += 8 + int(binary.LittleEndian.Uint32(saved[off:]))
		ends = append(ends, off)
	}
	if len(ends) != 3 || ends[2] != len(saved) {
		t.Fatalf("record ends %v in %d bytes", ends, len(saved))
	}
	whole := func(n int) int {
		k := 0
		for _, e := range ends {
			if e <= n {
				k++
			}
		}
		return k
	}
	for n := 0; n <= len(saved); n++ {
		r2 := ulNewRig(t, mustParse(t, natDoc))
		st, err := r2.sw.RestoreConns(bytes.NewReader(saved[:n]))
		if err != nil {
			t.Fatalf("cut at %d: %v", n, err)
		}
		partial := n > len(connsMagic) && whole(n) < 3 && !containsInt(ends, n) || n > 0 && n < len(connsMagic)
		if st.Conns != whole(n) || st.Truncated != partial || st.Corrupt != 0 {
			t.Fatalf("cut at %d: %+v, want %d restored, truncated %v", n, st, whole(n), partial)
		}
	}
	for i := len(connsMagic); i < len(saved); i++ {
		bad := bytes.Clone(saved)
		bad[i] ^= 0x40
		r2 := ulNewRig(t, mustParse(t, natDoc))
		st, err := r2.sw.RestoreConns(bytes.NewReader(bad))
		if err != nil {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if st.Corrupt == 0 && !st.Truncated || st.Conns > 2 || st.Conns < whole(i) {
			t.Errorf("byte %d flipped: %+v, want the %d records before it restored and it found", i, st, whole(i))
		}
	}
	if _, err := ulNewRig(t, mustParse(t, natDoc)).sw.RestoreConns(bytes.NewReader([]byte("NOTCONNSxxxxxxxxx"))); err == nil {
		t.Error("a file of another format was read")
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// FuzzConnsRecord: any payload with a right checksum either fails to
// read or reads back as what writes it again, byte for byte; nothing
// panics.
func FuzzConnsRecord(f *testing.F) {
	e := connEntry{port: "ov-a"}
	e.rec.Key.Proto = dataplane.ProtoTCP
	f.Add(e.marshal(nil))
	// Seeds: the payloads of NATed, port-mapped and balanced
	// connections.
	r := ulNewRig(&testing.T{}, mustParse(&testing.T{}, lbDoc))
	r.lbConnect("ov-a", 2000, "10.96.0.10", 80, 8080)
	r.lbConnect("ov-a", 3000, "10.96.0.40", 80, 8080)
	r.lbConnect("ov-a", 3000, "fd00:96::10", 80, 8080)
	rn := ulNewRig(&testing.T{}, mustParse(&testing.T{}, natDoc))
	natConns(&testing.T{}, rn)
	for _, sw := range []*Switch{r.sw, rn.sw} {
		var buf bytes.Buffer
		if _, err := sw.SaveConns(&buf); err != nil {
			f.Fatal(err)
		}
		b := buf.Bytes()[len(connsMagic):]
		for len(b) >= 8 {
			n := int(binary.LittleEndian.Uint32(b))
			f.Add(b[8 : 8+n])
			b = b[8+n:]
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var hdr [8]byte
		binary.LittleEndian.PutUint32(hdr[0:], uint32(len(b)))
		binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(b, crcTable))
		got, err := readConn(bytes.NewReader(append(hdr[:], b...)), make([]byte, maxConnRecord))
		if err != nil {
			return
		}
		if out := got.marshal(nil); !bytes.Equal(out, b) {
			t.Fatalf("read back as\n%x\nnot\n%x", out, b)
		}
	})
}

// FuzzConnsFile: a switch reads any file without panicking or failing
// (but for a header of another format), and holds a NAT binding only for
// a connection it restored.
func FuzzConnsFile(f *testing.F) {
	src := ulNewRig(&testing.T{}, mustParse(&testing.T{}, natDoc))
	natConns(&testing.T{}, src)
	var buf bytes.Buffer
	if _, err := src.sw.SaveConns(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(connsMagic))
	sw, err := New(mustParse(&testing.T{}, natDoc))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer sw.Pipeline().FlowTable().Flush()
		st, err := sw.RestoreConns(bytes.NewReader(b))
		if err != nil && (len(b) < len(connsMagic) || string(b[:len(connsMagic)]) == connsMagic) {
			t.Fatalf("RestoreConns: %v", err)
		}
		if n := sw.NAT().Bindings(); n > st.Conns {
			t.Fatalf("%d NAT bindings for %d connections restored", n, st.Conns)
		}
	})
}

// Balanced connections come back with their backends, their SourceVIP
// bindings and their tuples registered, and renew their clients'
// affinity.
func TestConnsRestoredBalanced(t *testing.T) {
	r := ulNewRig(t, mustParse(t, lbDoc))
	web := r.lbConnect("ov-a", 2000, "10.96.0.10", 80, 8080)
	sticky := r.lbConnect("ov-a", 3000, "10.96.0.40", 80, 8080)
	var buf bytes.Buffer
	saved, err := r.sw.SaveConns(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Conns != 2 || saved.Unsupported != 0 {
		t.Fatalf("SaveConns = %+v, want 2 connections", saved)
	}

	r2 := ulNewRig(t, mustParse(t, lbDoc))
	st, err := r2.sw.RestoreConns(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if st != (ConnsStats{Conns: 2}) {
		t.Fatalf("RestoreConns = %+v, want 2 connections restored", st)
	}
	if got, want := r2.sw.env.LB.Registered(), r.sw.env.LB.Registered(); len(got) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("registered tuples %v, want %v", got, want)
	}
	if n := r2.sw.NAT().Bindings(); n != r.sw.NAT().Bindings() {
		t.Errorf("NAT bindings after restore = %d, want %d", n, r.sw.NAT().Bindings())
	}
	if be, ok := r2.sw.affinityOf("ov-a", r2.sw.Now()); !ok || be != addr(lbIPOf[sticky]) {
		t.Errorf("affinity of ov-a = %v %v, want %s", be, ok, lbIPOf[sticky])
	}
	// The backend answers first: the reply reaches the client from the
	// VIP.
	rep := natPkt{smac: lbMACOf[web], dmac: lbDR, src: lbIPOf[web], sport: 8080, dst: lbIPOf["ov-a"], dport: 2000, proto: "tcp", flags: "A", payload: "data"}
	back := rep
	back.smac, back.dmac, back.src, back.sport = lbDR, lbOvA, "10.96.0.10", 80
	r2.out(web, natFrame(t, rep), "ov-a", natFrame(t, back))
}
