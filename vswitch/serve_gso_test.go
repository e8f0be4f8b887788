package vswitch

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ufp-dev/ufp/dataplane"
)

// offloadDevice is a memory device whose reads carry the offload metadata
// rx (as a TAP with a virtio-net header gives it) and which, with gso
// set, takes super-frames whole (GSOWriter), recording the metadata of
// every frame written.
type offloadDevice struct {
	*MemDevice
	rx      dataplane.Offload
	gso     bool
	written chan dataplane.Offload
}

func newOffloadDevice(name string, rx dataplane.Offload, gso bool) *offloadDevice {
	return &offloadDevice{MemDevice: NewMemDevice(name, 256), rx: rx, gso: gso, written: make(chan dataplane.Offload, 256)}
}

func (d *offloadDevice) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	n, err := d.MemDevice.ReadPackets(pkts)
	for _, p := range pkts[:n] {
		p.Offload = d.rx
	}
	return n, err
}

func (d *offloadDevice) WritePackets(pkts []*dataplane.Packet) (int, error) {
	for _, p := range pkts {
		d.written <- p.Offload
	}
	return d.MemDevice.WritePackets(pkts)
}

func (d *offloadDevice) WritesGSO() bool { return d.gso }

// TestServeSegmentsForDevice checks the egress side of GSO: a UDP
// super-frame read from pod-a is written whole, with its offload
// metadata, to a device that takes super-frames (pod-b), and segmented in
// software into datagrams with their own lengths and checksums for one
// that does not (pod-c).
func TestServeSegmentsForDevice(t *testing.T) {
	sw, _, start, stop := devSwitch(t)
	const mss, size = 1400, 10000
	hdrLen := dataplane.EthernetLen + 20 + 8
	rx := dataplane.Offload{GSOType: dataplane.GSOUDPL4, GSOSize: mss, HdrLen: uint16(hdrLen)}
	a := newOffloadDevice("pod-a", rx, false)
	b := newOffloadDevice("pod-b", dataplane.Offload{}, true)
	c := newOffloadDevice("pod-c", dataplane.Offload{}, false)
	for port, d := range map[string]*offloadDevice{"pod-a": a, "pod-b": b, "pod-c": c} {
		sw.Detach(port)
		if err := sw.Attach(port, d); err != nil {
			t.Fatal(err)
		}
	}
	start()
	defer stop()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	super := func(dstMAC, dst string) []byte {
		eth, nl, l3 := ptL3(devMACA, dstMAC, "10.0.0.10", dst, layers.IPProtocolUDP)
		u := &layers.UDP{SrcPort: 5000, DstPort: 53}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		return ptSerialize(t, eth, l3, u, gopacket.Payload(payload))
	}

	// To pod-b: whole.
	a.Inject(super(devMACB, "10.0.0.11"))
	got := mustReceive(t, b.MemDevice, "the super-frame to pod-b")
	if len(got) != hdrLen+size {
		t.Errorf("pod-b got a frame of %d bytes, want the super-frame's %d", len(got), hdrLen+size)
	}
	if o := <-b.written; o != rx {
		t.Errorf("pod-b's frame was written with offloads %+v, want %+v", o, rx)
	}

	// To pod-c: segmented.
	a.Inject(super(devMACC, "10.0.0.12"))
	var joined []byte
	for i := range (size + mss - 1) / mss {
		f := mustReceive(t, c.MemDevice, "a segment to pod-c")
		if o := <-c.written; o != (dataplane.Offload{}) {
			t.Errorf("segment %d written with offloads %+v", i, o)
		}
		want := min(mss, size-i*mss)
		if len(f) != hdrLen+want {
			t.Fatalf("segment %d: %d bytes, want %d", i, len(f), hdrLen+want)
		}
		ip, udp := f[dataplane.EthernetLen:], f[dataplane.EthernetLen+20:]
		if got := binary.BigEndian.Uint16(ip[2:]); int(got) != 28+want {
			t.Errorf("segment %d: IPv4 total length %d, want %d", i, got, 28+want)
		}
		if dataplane.Checksum(ip[:20], 0) != 0 {
			t.Errorf("segment %d: bad IPv4 header checksum", i)
		}
		if got := binary.BigEndian.Uint16(udp[4:]); int(got) != 8+want {
			t.Errorf("segment %d: UDP length %d, want %d", i, got, 8+want)
		}
		if dataplane.Checksum(udp, dataplane.PseudoHeaderSum(ip[12:16], ip[16:20], dataplane.ProtoUDP, len(udp))) != 0 {
			t.Errorf("segment %d: bad UDP checksum", i)
		}
		joined = append(joined, udp[8:]...)
	}
	if !bytes.Equal(joined, payload) {
		t.Error("the segments' payloads are not the super-frame's")
	}
	if f, ok := c.Receive(100 * time.Millisecond); ok {
		t.Errorf("pod-c got one frame too many (%d bytes)", len(f))
	}
}
