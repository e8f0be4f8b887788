package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// TestCaptureErrors checks that a capture ufpd cannot make is an error
// that says why, and leaves no file. (Live captures through devices are
// tested in e2e.)
func TestCaptureErrors(t *testing.T) {
	t.Parallel()
	d := startUfpd(t, demoPolicy(t))
	dir := t.TempDir()
	file := filepath.Join(dir, "pod-a.pcapng")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"capture", "pod-a", "-w", file}, 1, "ufpctl: capture of port \"pod-a\": no device attached\n"},
		{[]string{"capture", "pod-a", "-w", "-", "-c", "1", "-t", "5s"}, 1, "ufpctl: capture of port \"pod-a\": no device attached"},
		{[]string{"capture", "nope", "-w", file}, 1, "ufpctl: capture: no port \"nope\"\n"},
		{[]string{"capture", "pod-a"}, 2, "ufpctl capture: -w FILE is required (- for standard output)"},
		{[]string{"capture", "pod-a", "-w", file, "-direction", "both"}, 2, `ufpctl capture: -direction: "both" is not in or out`},
		{[]string{"capture", "pod-a", "-w", file, "-c", "-1"}, 2, "ufpctl capture: -c: -1 is negative"},
		{[]string{"capture", "pod-a", "-w", file, "-t", "soon"}, 2, `invalid value "soon" for flag -t`},
	} {
		r := ctl(t, d, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("ufpctl %s: %v\nwant exit %d and %q", strings.Join(tc.args, " "), r, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a failed capture left %s: %v", file, err)
	}
}

// pcapngStream writes a pcapng stream of n frames, in the byte order
// order, as a capture does: section and interface headers, the frames,
// interface statistics.
func pcapngStream(t *testing.T, n int, order binary.ByteOrder) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{Name: "pod-a", LinkType: layers.LinkTypeEthernet, SnapLength: 65535},
		pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "ufp"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i := range n {
		frame := make([]byte, 60+i%7) // lengths that need padding
		ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(frame), Length: len(frame)}
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteInterfaceStats(0, pcapgo.NgInterfaceStatistics{LastUpdate: ts, PacketsDropped: 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if order == binary.BigEndian {
		return bigEndian(t, b.Bytes())
	}
	return b.Bytes()
}

// bigEndian rewrites the block headers of little-endian pcapng stream b
// in big-endian order (bodies are left as they are: the counter reads
// only headers).
func bigEndian(t *testing.T, b []byte) []byte {
	t.Helper()
	out := bytes.Clone(b)
	for off := 0; off < len(out); {
		typ := binary.LittleEndian.Uint32(out[off:])
		n := int(binary.LittleEndian.Uint32(out[off+4:]))
		binary.BigEndian.PutUint32(out[off:], typ)
		binary.BigEndian.PutUint32(out[off+4:], uint32(n))
		binary.BigEndian.PutUint32(out[off+n-4:], uint32(n))
		if typ == blockSection {
			binary.BigEndian.PutUint32(out[off+8:], byteOrderMagic)
		}
		off += n
	}
	return out
}

// TestPcapngCounter feeds pcapng streams to the counter in random
// pieces: every byte passes, and the frames and the last whole block are
// counted.
func TestPcapngCounter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, n := range []int{0, 1, 5, 100} {
			stream := pcapngStream(t, n, order)
			for range 20 {
				var out bytes.Buffer
				cw := &pcapngCounter{w: &out}
				for rest := stream; len(rest) > 0; {
					k := min(len(rest), 1+rng.IntN(97))
					cw.Write(rest[:k])
					rest = rest[k:]
				}
				if !bytes.Equal(out.Bytes(), stream) || cw.frames != n || cw.n != int64(len(stream)) ||
					cw.complete != cw.n || cw.bad || cw.note(true) != "" {
					t.Fatalf("%v, %d frames: counted %d frames, %d bytes (%d whole), bad %v, note %q",
						order, n, cw.frames, cw.n, cw.complete, cw.bad, cw.note(true))
				}
			}
			// Cut within a block: the frames before the cut count, the
			// bytes of the block cut short are noted.
			if n > 0 {
				cut := len(stream) - 30
				cw := &pcapngCounter{w: &bytes.Buffer{}}
				cw.Write(stream[:cut])
				if cw.frames != n || cw.complete >= int64(cut) || !strings.Contains(cw.note(true), "were left out") {
					t.Errorf("%v, %d frames cut at %d: %d frames, %d whole bytes, note %q", order, n, cut, cw.frames, cw.complete, cw.note(true))
				}
			}
		}
	}
	// Not pcapng: passed on, not counted.
	var out bytes.Buffer
	cw := &pcapngCounter{w: &out}
	cw.Write([]byte("HTTP/1.1 500 oops, not a capture at all\n"))
	if !cw.bad || cw.frames != 0 || out.Len() != int(cw.n) || !strings.Contains(cw.note(true), "not pcapng") {
		t.Errorf("not pcapng: bad %v, %d frames, %d bytes of %d", cw.bad, cw.frames, cw.n, out.Len())
	}
}

// TestCaptureFileCut checks that a file cut within a block is truncated
// to its last whole block.
func TestCaptureFileCut(t *testing.T) {
	stream := pcapngStream(t, 3, binary.LittleEndian)
	path := filepath.Join(t.TempDir(), "cut.pcapng")
	lf := &lazyFile{path: path}
	cw := &pcapngCounter{w: lf}
	cw.Write(stream[:len(stream)-10])
	if err := lf.close(cw); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != cw.complete {
		t.Fatalf("file of %d bytes, want the %d of whole blocks", len(b), cw.complete)
	}
	r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for {
		if _, _, err := r.ReadPacketData(); err != nil {
			break
		}
		frames++
	}
	if frames != 3 {
		t.Errorf("%d frames read back from the truncated file, want 3", frames)
	}
}

// TestCaptureStream checks that the capture's options reach ufpd, its
// pcapng reaches the file or standard output whole, and ufpctl says how
// much it wrote.
func TestCaptureStream(t *testing.T) {
	t.Parallel()
	stream := pcapngStream(t, 3, binary.LittleEndian)
	var query atomic.Value
	sock := fakeUfpd(t, func(w http.ResponseWriter, r *http.Request) {
		query.Store(r.PathValue("name") + "?" + r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/x-pcapng")
		// In pieces, as frames come.
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 50)
			w.Write(rest[:k])
			w.(http.Flusher).Flush()
			rest = rest[k:]
		}
	})
	file := filepath.Join(t.TempDir(), "pod-a.pcapng")
	r := ctl(t, nil, "", "capture", "pod-a", "-s", sock, "-w", file, "-c", "3", "-snaplen", "128", "-direction", "in")
	want := fmt.Sprintf("ufpctl: captured 3 frames of port pod-a: %d bytes written to %s\n", len(stream), file)
	if r.code != 0 || r.stderr != want || r.stdout != "" {
		t.Errorf("capture to a file: %v\nwant stderr %q", r, want)
	}
	if q := query.Load(); q != "pod-a?count=3&direction=in&snaplen=128" {
		t.Errorf("ufpd was asked for %v", q)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, stream) {
		t.Errorf("the file holds %d bytes (%v), want the %d of the stream", len(b), err, len(stream))
	}
	r = ctl(t, nil, "", "-s", sock, "capture", "pod-a", "-w", "-")
	if r.code != 0 || r.stdout != string(stream) ||
		r.stderr != fmt.Sprintf("ufpctl: captured 3 frames of port pod-a: %d bytes written to standard output\n", len(stream)) {
		t.Errorf("capture to standard output: exit %d, %d bytes out, stderr %q", r.code, len(r.stdout), r.stderr)
	}
}

// TestCaptureDuration checks that -t ends a capture that ufpd would go on
// with, keeping what came; and that an empty answer is an error.
func TestCaptureDuration(t *testing.T) {
	t.Parallel()
	stream := pcapngStream(t, 2, binary.LittleEndian)
	sock := fakeUfpd(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("count") == "9" {
			return // the answer ufpd gives for a port with no device
		}
		w.Write(stream[:len(stream)-7]) // the statistics block, cut short
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	file := filepath.Join(t.TempDir(), "pod-a.pcapng")
	start := time.Now()
	r := ctl(t, nil, "", "-s", sock, "capture", "pod-a", "-w", file, "-t", "300ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("-t 300ms took %v", d)
	}
	if r.code != 0 || !strings.Contains(r.stderr, "ufpctl: captured 2 frames of port pod-a: ") ||
		!strings.Contains(r.stderr, "bytes were left out)") {
		t.Errorf("capture for 300ms: %v", r)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if rd, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions); err != nil {
		t.Errorf("the file does not read as pcapng: %v", err)
	} else {
		n := 0
		for {
			if _, _, err := rd.ReadPacketData(); err != nil {
				break
			}
			n++
		}
		if n != 2 {
			t.Errorf("%d frames read back, want 2", n)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.pcapng")
	r = ctl(t, nil, "", "-s", sock, "capture", "pod-a", "-w", empty, "-c", "9")
	if r.code != 1 || r.stderr != "ufpctl: capture of port pod-a: ufpd ended the capture without sending anything (its log says why)\n" {
		t.Errorf("an empty answer: %v", r)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("an empty capture left a file: %v", err)
	}
}
