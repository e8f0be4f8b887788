package vswitch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/dataplane"
	"github.com/ufp-dev/ufp/internal/testenv"
)

// tapDevice is a Device over a TAP interface opened without IFF_VNET_HDR:
// one frame per read and per write, no offload metadata. The fd is
// non-blocking and served by Go's poller, so Close unblocks a pending
// ReadPackets. The fd stays usable after the interface is moved into
// another network namespace. A tapDevice is read by one goroutine and
// written by any number (writes are serialised).
type tapDevice struct {
	name string
	f    *os.File
	wmu  sync.Mutex

	// RxFrames and TxFrames count frames read and written.
	RxFrames, TxFrames atomic.Uint64
	// TxOffloadDropped counts frames handed to WritePackets with offload
	// metadata (a partial checksum or GSO) that a TAP without a virtio-net
	// header cannot carry; they are dropped. TxDownDropped counts frames
	// the kernel refused because the link was down (EIO).
	TxOffloadDropped, TxDownDropped atomic.Uint64
}

var _ Device = (*tapDevice)(nil)

// openTAP creates the TAP interface name (at most 15 bytes) in the caller's
// network namespace. The interface is not persistent: it disappears when
// the device is closed.
func openTAP(name string) (*tapDevice, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %q: TUNSETIFF: %w", name, err)
	}
	// A non-blocking fd given to os.NewFile is registered with the poller.
	return &tapDevice{name: ifr.Name(), f: os.NewFile(uintptr(fd), "tap:"+name)}, nil
}

// ReadPackets implements Device: it reads one frame into pkts[0].
func (d *tapDevice) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	for {
		buf := pkts[0].Reset()
		n, err := d.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return 0, ErrClosed
			}
			return 0, fmt.Errorf("tap %s: read: %w", d.name, err)
		}
		if n == 0 || !pkts[0].SetLen(n) {
			continue
		}
		d.RxFrames.Add(1)
		return 1, nil
	}
}

// WritePackets implements Device: one write per frame. Frames the link
// refuses because it is down are dropped and counted, as a NIC would; other
// errors are joined and returned.
func (d *tapDevice) WritePackets(pkts []*dataplane.Packet) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	var errs []error
	n := 0
	for _, p := range pkts {
		if p.Offload.NeedsCsum || p.Offload.GSOType != dataplane.GSONone {
			d.TxOffloadDropped.Add(1)
			continue
		}
		if _, err := d.f.Write(p.Bytes()); err != nil {
			switch {
			case errors.Is(err, os.ErrClosed):
				return n, ErrClosed
			case errors.Is(err, syscall.EIO):
				d.TxDownDropped.Add(1)
			default:
				errs = append(errs, fmt.Errorf("tap %s: write: %w", d.name, err))
			}
			continue
		}
		d.TxFrames.Add(1)
		n++
	}
	return n, errors.Join(errs...)
}

// Close implements Device; it unblocks a pending ReadPackets and removes
// the interface.
func (d *tapDevice) Close() error {
	err := d.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// tapRequire skips t unless it can create TAP interfaces and namespaces
// (or fails it under CI=true).
func tapRequire(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTUN(t)
	testenv.NeedTool(t, "ip")
}

// runCmd runs a command with a deadline and fails t with its output if it
// fails.
func runCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runCmdErr(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runCmdErr(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %q: %v: %s", name, args, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// addNetns creates the network namespace name, deleted (by that name) when
// the test ends, with its loopback up and IPv6 off.
func addNetns(t *testing.T, name string) {
	t.Helper()
	runCmdErr("ip", "netns", "del", name) // a leftover of a crashed run with this PID
	runCmd(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if _, err := runCmdErr("ip", "netns", "del", name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	runCmd(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// TestTAPDevice checks the test TAP device: frames pass both ways after the
// interface moved into a namespace, and Close unblocks a pending read.
func TestTAPDevice(t *testing.T) {
	tapRequire(t)
	ns := fmt.Sprintf("nt%dns", os.Getpid())
	ifName := fmt.Sprintf("nt%dtap", os.Getpid())
	addNetns(t, ns)
	dev, err := openTAP(ifName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	nsMAC := dataplane.MAC{2, 0, 0, 0, 0x99, 1}
	runCmd(t, "ip", "link", "set", "dev", ifName, "address", nsMAC.String(), "netns", ns)
	runCmd(t, "ip", "-n", ns, "addr", "add", "10.99.0.1/24", "dev", ifName)
	runCmd(t, "ip", "-n", ns, "link", "set", ifName, "up")

	// Ask the namespace for 10.99.0.1's MAC from 10.99.0.2, repeating the
	// request (the first frames after the link comes up can be lost), and
	// read its reply from the fd.
	peerMAC := dataplane.MAC{2, 0, 0, 0, 0x99, 2}
	req := make([]byte, 42)
	copy(req[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(req[6:12], peerMAC[:])
	binary.BigEndian.PutUint16(req[12:], 0x0806)
	copy(req[14:22], []byte{0, 1, 8, 0, 6, 4, 0, 1})
	copy(req[22:28], peerMAC[:])
	copy(req[28:32], []byte{10, 99, 0, 2})
	copy(req[38:42], []byte{10, 99, 0, 1})
	out := dataplane.NewPacket(dataplane.BufferSize)
	got := make(chan []byte, 16)
	go func() {
		pkts := []*dataplane.Packet{dataplane.NewPacket(dataplane.BufferSize)}
		for {
			if _, err := dev.ReadPackets(pkts); err != nil {
				got <- nil // closed
				return
			}
			got <- append([]byte(nil), pkts[0].Bytes()...)
		}
	}()
	var reply []byte
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	out.SetFrame(req)
	if _, err := dev.WritePackets([]*dataplane.Packet{out}); err != nil {
		t.Fatal(err)
	}
wait:
	for {
		select {
		case f := <-got:
			if f == nil {
				t.Fatal("read ended early")
			}
			if len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0806 && binary.BigEndian.Uint16(f[20:]) == 2 {
				reply = f
				break wait
			}
		case <-tick.C:
			out.SetFrame(req)
			if _, err := dev.WritePackets([]*dataplane.Packet{out}); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no ARP reply from the namespace through the TAP")
		}
	}
	if dataplane.MAC(reply[22:28]) != nsMAC || !bytes.Equal(reply[28:32], []byte{10, 99, 0, 1}) || dataplane.MAC(reply[0:6]) != peerMAC {
		t.Errorf("ARP reply: % x", reply[:42])
	}

	// The reader goroutine is blocked in ReadPackets now (or soon);
	// Close must end it.
	time.Sleep(50 * time.Millisecond)
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case f := <-got:
			if f == nil {
				if _, err := dev.ReadPackets([]*dataplane.Packet{out}); err != ErrClosed {
					t.Errorf("read after close: %v, want ErrClosed", err)
				}
				return
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Close did not unblock a pending ReadPackets")
		}
	}
}

// serveTAPs runs sw.Serve until t ends, then checks that it stopped
// cleanly and wrote no frame with offload metadata to taps, runs check
// (if any) on the stopped switch, and logs the drops if t failed.
func serveTAPs(t *testing.T, sw *Switch, taps []*tapDevice, check func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
		for _, d := range taps {
			if n := d.TxOffloadDropped.Load(); n > 0 {
				t.Errorf("the switch wrote %d frames with offload metadata to %s", n, d.name)
			}
		}
		if check != nil {
			check()
		}
		if t.Failed() {
			t.Logf("switch drops: %s", sw.Pipeline().Drops.String())
		}
	})
}
