package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Frame is one captured Ethernet frame and the port (the pcapng
// interface, named after a switch port) it was captured on.
type Frame struct {
	Port string
	Time time.Time
	Data []byte
}

// ReadFrames reads a pcapng whose interfaces are named after ports. Every
// frame must be Ethernet and captured whole.
func ReadFrames(b []byte) ([]Frame, error) {
	r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.NgReaderOptions{})
	if err != nil {
		return nil, fmt.Errorf("not a pcapng file: %w", err)
	}
	var frames []Frame
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return nil, fmt.Errorf("packet %d: %w", len(frames)+1, err)
		}
		intf, err := r.Interface(ci.InterfaceIndex)
		if err != nil {
			return nil, fmt.Errorf("packet %d: %w", len(frames)+1, err)
		}
		if intf.LinkType != layers.LinkTypeEthernet {
			return nil, fmt.Errorf("packet %d: interface %q has link type %s; only Ethernet is replayed",
				len(frames)+1, intf.Name, intf.LinkType)
		}
		if ci.CaptureLength < ci.Length {
			return nil, fmt.Errorf("packet %d: captured %d of %d bytes; replay needs whole frames",
				len(frames)+1, ci.CaptureLength, ci.Length)
		}
		frames = append(frames, Frame{Port: intf.Name, Time: ci.Timestamp, Data: slices.Clone(data)})
	}
}

// WriteFrames writes frames as a pcapng made by application, with one
// interface per port, in the order of ports (then of first use for names
// not in ports).
func WriteFrames(w io.Writer, application string, ports []string, frames []Frame) error {
	names := slices.Clone(ports)
	for _, f := range frames {
		if !slices.Contains(names, f.Port) {
			names = append(names, f.Port)
		}
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	intf := func(name string) pcapgo.NgInterface {
		return pcapgo.NgInterface{Name: name, LinkType: layers.LinkTypeEthernet, TimestampResolution: 9}
	}
	nw, err := pcapgo.NewNgWriterInterface(w, intf(names[0]), pcapgo.NgWriterOptions{
		SectionInfo: pcapgo.NgSectionInfo{Application: application},
	})
	if err != nil {
		return err
	}
	for _, n := range names[1:] {
		if _, err := nw.AddInterface(intf(n)); err != nil {
			return err
		}
	}
	for _, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(f.Data), Length: len(f.Data),
			InterfaceIndex: slices.Index(names, f.Port)}
		if err := nw.WritePacket(ci, f.Data); err != nil {
			return err
		}
	}
	return nw.Flush()
}

// Writer writes a live capture of one switch port as pcapng: frames with
// their direction, and at the end the count of frames the capture missed.
// Not safe for concurrent use.
type Writer struct {
	ng *pcapgo.NgWriter
	w  io.Writer
}

// NewWriter starts a pcapng on w for the capture of port, frames cut to
// snaplen bytes.
func NewWriter(w io.Writer, port string, snaplen int) (*Writer, error) {
	ng, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{
		Name:                port,
		Description:         "ufp switch port " + port,
		OS:                  runtime.GOOS,
		LinkType:            layers.LinkTypeEthernet,
		SnapLength:          uint32(snaplen),
		TimestampResolution: 9,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{
		Hardware:    runtime.GOARCH,
		OS:          runtime.GOOS,
		Application: "ufp",
	}})
	if err != nil {
		return nil, err
	}
	return &Writer{ng: ng, w: w}, nil
}

// Write writes a frame captured at ts, of which data holds the first
// bytes of length; out says the switch sent it (else received it).
func (w *Writer) Write(ts time.Time, data []byte, length int, out bool) error {
	dir := pcapgo.NgEpbFlagDirectionInbound
	if out {
		dir = pcapgo.NgEpbFlagDirectionOutbound
	}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: length}
	return w.ng.WritePacketWithOptions(ci, data, pcapgo.NgPacketOptions{Flags: &pcapgo.NgEpbFlags{Direction: dir}})
}

// Stats writes the capture's statistics: when it ran and how many frames
// it dropped.
func (w *Writer) Stats(start, end time.Time, dropped uint64) error {
	return w.ng.WriteInterfaceStats(0, pcapgo.NgInterfaceStatistics{
		LastUpdate:      end,
		StartTime:       start,
		EndTime:         end,
		PacketsReceived: pcapgo.NgNoValue64,
		PacketsDropped:  dropped,
	})
}

// Flush flushes what is written, through the underlying writer too if it
// can be flushed (an http.ResponseWriter, a bufio.Writer), so that a live
// reader gets it promptly.
func (w *Writer) Flush() error {
	if err := w.ng.Flush(); err != nil {
		return err
	}
	switch f := w.w.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}
