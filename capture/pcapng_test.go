package capture

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func frame(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestFramesRoundTrip(t *testing.T) {
	t0 := time.Unix(1700000000, 123456789).UTC()
	in := []Frame{
		{Port: "uplink", Time: t0, Data: frame(60)},
		{Port: "pod-a", Time: t0.Add(time.Millisecond), Data: frame(1514)},
		{Port: "pod-c", Time: t0.Add(2 * time.Millisecond), Data: frame(64)},
	}
	var b bytes.Buffer
	if err := WriteFrames(&b, "test", []string{"pod-a", "pod-b", "uplink"}, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadFrames(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d frames back, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].Port != in[i].Port || !out[i].Time.Equal(in[i].Time) || !bytes.Equal(out[i].Data, in[i].Data) {
			t.Errorf("frame %d: %s %s %d bytes, want %s %s %d bytes", i, out[i].Port, out[i].Time, len(out[i].Data), in[i].Port, in[i].Time, len(in[i].Data))
		}
	}
	// Interfaces in the order of ports, then of first use; unused ones too.
	r, err := pcapgo.NewNgReader(bytes.NewReader(b.Bytes()), pcapgo.NgReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err := r.ReadPacketData(); err != nil {
			break
		}
	}
	var names []string
	for i := range r.NInterfaces() {
		intf, _ := r.Interface(i)
		names = append(names, intf.Name)
	}
	if want := []string{"pod-a", "pod-b", "uplink", "pod-c"}; !slices.Equal(names, want) {
		t.Errorf("interfaces %v, want %v", names, want)
	}
}

func TestReadFramesRefuses(t *testing.T) {
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "x", LinkType: layers.LinkTypeRaw}, pcapgo.NgWriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.WritePacket(ciOf(20, 20), frame(20))
	w.Flush()
	if _, err := ReadFrames(b.Bytes()); err == nil || !strings.Contains(err.Error(), "only Ethernet is replayed") {
		t.Errorf("a raw IP capture: %v", err)
	}
	b.Reset()
	w, _ = pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "x", LinkType: layers.LinkTypeEthernet}, pcapgo.NgWriterOptions{})
	w.WritePacket(ciOf(60, 100), frame(60))
	w.Flush()
	if _, err := ReadFrames(b.Bytes()); err == nil || !strings.Contains(err.Error(), "captured 60 of 100 bytes") {
		t.Errorf("a cut frame: %v", err)
	}
	if _, err := ReadFrames([]byte("not pcapng")); err == nil || !strings.Contains(err.Error(), "not a pcapng file") {
		t.Errorf("garbage: %v", err)
	}
}

func TestWriterDirectionsAndStats(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, "pod-a", 128)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	if err := w.Write(t0, frame(60), 60, false); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t0.Add(time.Second), frame(128), 1514, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Stats(t0, t0.Add(2*time.Second), 7); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(b.Bytes()), pcapgo.NgReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ capLen, length int }{{60, 60}, {128, 1514}} {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if len(data) != want.capLen || ci.Length != want.length {
			t.Errorf("frame %d: %d of %d bytes, want %d of %d", i, len(data), ci.Length, want.capLen, want.length)
		}
	}
	intf, err := r.Interface(0)
	if err != nil || intf.Name != "pod-a" || intf.SnapLength != 128 {
		t.Errorf("interface %+v, %v", intf, err)
	}
}

// FuzzReadFrames: any input is read or refused with an error, never a
// panic; what is read writes back to the same frames.
func FuzzReadFrames(f *testing.F) {
	var b bytes.Buffer
	WriteFrames(&b, "fuzz", []string{"a"}, []Frame{{Port: "a", Time: time.Unix(1, 0), Data: frame(60)}})
	f.Add(b.Bytes())
	// The project's own captures, whole and cut in half.
	seeds, _ := filepath.Glob(filepath.Join("..", "testdata", "scenarios", "*", "*.pcapng"))
	more, _ := filepath.Glob(filepath.Join("..", "cmd", "ufp-replay", "quickstart", "*.pcapng"))
	for _, p := range append(seeds, more...) {
		c, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(c)
		f.Add(c[:len(c)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a})
	f.Fuzz(func(t *testing.T, in []byte) {
		frames, err := ReadFrames(in)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteFrames(&out, "fuzz", nil, frames); err != nil {
			t.Fatal(err)
		}
		again, err := ReadFrames(out.Bytes())
		if err != nil {
			t.Fatalf("what was read does not read back: %v", err)
		}
		if len(again) != len(frames) {
			t.Fatalf("%d frames back, want %d", len(again), len(frames))
		}
		for i := range frames {
			if again[i].Port != frames[i].Port || !bytes.Equal(again[i].Data, frames[i].Data) {
				t.Fatalf("frame %d differs after a round trip", i)
			}
		}
	})
}

func ciOf(capLen, length int) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: capLen, Length: length}
}
