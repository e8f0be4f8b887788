package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ufp-dev/ufp/api"
)

// Live captures: ufpd streams a port's frames as pcapng; ufpctl writes
// them to a file or to standard output and says how much it wrote.

func (c *cli) capture(args []string) error {
	var (
		file string
		opt  api.CaptureOptions
		dur  time.Duration
	)
	pos, err := c.parse(args, func(fl *flagSet) {
		fl.StringVar(&file, "w", "", "write the pcapng to `file` (- for standard output)")
		fl.IntVar(&opt.Count, "c", 0, "stop after `count` frames (0: no limit)")
		fl.IntVar(&opt.Snaplen, "snaplen", 0, "capture at most `n` bytes of each frame (default 65535)")
		fl.StringVar(&opt.Direction, "direction", "", "`in|out`: the frames the port's device delivers (in) or those written to it (out); default both")
		fl.DurationVar(&dur, "t", 0, "stop after `duration` (e.g. 10s)")
	}, 1, 1)
	if err != nil {
		return err
	}
	port := pos[0]
	switch {
	case file == "":
		return c.usageErr("-w FILE is required (- for standard output)")
	case opt.Count < 0:
		return c.usageErr("-c: %d is negative", opt.Count)
	case opt.Snaplen < 0:
		return c.usageErr("-snaplen: %d is negative", opt.Snaplen)
	case dur < 0:
		return c.usageErr("-t: %v is negative", dur)
	}
	switch opt.Direction {
	case "", "in", "out":
	default:
		return c.usageErr("-direction: %q is not in or out", opt.Direction)
	}
	ctx := c.ctx
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	out := &lazyFile{path: file, stdout: c.stdout}
	cw := &pcapngCounter{w: out}
	err = c.client.Capture(ctx, port, cw, opt)
	if cerr := out.close(cw); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if cw.n == 0 {
		return fmt.Errorf("capture of port %s: ufpd ended the capture without sending anything (its log says why)", port)
	}
	where, written := file, cw.complete
	if file == "-" {
		where, written = "standard output", cw.n
	}
	fmt.Fprintf(c.stderr, "ufpctl: captured %s of port %s: %d bytes written to %s%s\n",
		plural(cw.frames, "frame"), port, written, where, cw.note(file != "-"))
	return nil
}

// lazyFile is the capture's output: standard output, or a file created
// on the first write (so that a capture that fails leaves none).
type lazyFile struct {
	path   string
	stdout io.Writer
	f      *os.File
}

func (l *lazyFile) Write(b []byte) (int, error) {
	if l.path == "-" {
		return l.stdout.Write(b)
	}
	if l.f == nil {
		f, err := os.Create(l.path)
		if err != nil {
			return 0, err
		}
		l.f = f
	}
	return l.f.Write(b)
}

// close closes the file, cut after the last whole block of cw if the
// stream ended within one (the capture was interrupted).
func (l *lazyFile) close(cw *pcapngCounter) error {
	if l.f == nil {
		return nil
	}
	var err error
	if cw.n > cw.complete && !cw.bad {
		err = l.f.Truncate(cw.complete)
	}
	return errors.Join(err, l.f.Close())
}

// pcapngCounter passes a pcapng stream on to w and counts its bytes and
// the frames of its packet blocks, following the stream block by block.
type pcapngCounter struct {
	w        io.Writer
	n        int64 // bytes written
	complete int64 // bytes up to the end of the last whole block
	frames   int   // packet blocks complete
	bad      bool  // the stream is not pcapng: frames are not counted

	hdr    [12]byte // the current block's header, as far as read
	nh     int
	order  binary.ByteOrder // the section's
	remain int64            // bytes of the current block after its header
	packet bool             // the current block holds a frame
}

// pcapng block types (the pcapng specification, section 4).
const (
	blockSection        = 0x0A0D0D0A
	blockSimplePacket   = 0x00000003
	blockEnhancedPacket = 0x00000006
	blockPacket         = 0x00000002 // obsolete
	byteOrderMagic      = 0x1A2B3C4D
)

func (p *pcapngCounter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.scan(b[:n])
	return n, err
}

// scan follows the stream over b.
func (p *pcapngCounter) scan(b []byte) {
	for len(b) > 0 && !p.bad {
		if p.nh < len(p.hdr) {
			k := copy(p.hdr[p.nh:], b)
			p.nh += k
			p.n += int64(k)
			b = b[k:]
			if p.nh == len(p.hdr) {
				p.header()
			}
			continue
		}
		k := int64(len(b))
		if k > p.remain {
			k = p.remain
		}
		p.remain -= k
		p.n += k
		b = b[k:]
		if p.remain == 0 {
			p.endBlock()
		}
	}
	p.n += int64(len(b)) // what is left once the stream is not pcapng
}

// header reads a block's header: type, length and (for a section
// header) the byte-order magic.
func (p *pcapngCounter) header() {
	if binary.BigEndian.Uint32(p.hdr[0:4]) == blockSection { // the same in both orders
		switch uint32(byteOrderMagic) {
		case binary.LittleEndian.Uint32(p.hdr[8:12]):
			p.order = binary.LittleEndian
		case binary.BigEndian.Uint32(p.hdr[8:12]):
			p.order = binary.BigEndian
		default:
			p.bad = true
			return
		}
	}
	if p.order == nil {
		p.bad = true // no section header first
		return
	}
	length := p.order.Uint32(p.hdr[4:8])
	if length < 12 || length%4 != 0 {
		p.bad = true
		return
	}
	switch p.order.Uint32(p.hdr[0:4]) {
	case blockEnhancedPacket, blockSimplePacket, blockPacket:
		p.packet = true
	}
	p.remain = int64(length) - 12
	if p.remain == 0 {
		p.endBlock()
	}
}

func (p *pcapngCounter) endBlock() {
	if p.packet {
		p.frames++
	}
	p.complete, p.nh, p.packet = p.n, 0, false
}

// note says what was odd about the stream, if anything; truncated: the
// block cut short was removed from the file.
func (p *pcapngCounter) note(truncated bool) string {
	switch {
	case p.bad:
		return " (the stream is not pcapng as ufpctl reads it: frames not counted)"
	case p.n > p.complete && truncated:
		return fmt.Sprintf(" (the capture ended within a block: its %d bytes were left out)", p.n-p.complete)
	case p.n > p.complete:
		return fmt.Sprintf(" (the capture ended within a block: its last %d bytes are incomplete)", p.n-p.complete)
	}
	return ""
}
