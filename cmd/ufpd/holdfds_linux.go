package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/vswitch"
)

// handable is a device whose descriptor can be handed to another process
// (the holder, a successor): TAPs and AF_PACKET uplinks.
type handable interface {
	Quiesce() <-chan struct{}
	KeepOnClose()
	Control(fn func(fd uintptr)) error
}

// handOf returns dev's hand-over side and the descriptor's type, or nil
// if dev cannot be handed over (a TUN, an AF_XDP uplink).
func handOf(dev vswitch.Device) (handable, string) {
	switch dev := dev.(type) {
	case *device.TAP:
		return dev, fdTypeTAP
	case *uplink:
		if r, ok := dev.Uplink.(*device.Raw); ok {
			return rawHand{dev, r}, fdTypeAFPacket
		}
	}
	return nil, ""
}

// rawHand is an AF_PACKET uplink's hand-over side: once handed over, its
// Close leaves the interface dedicated to the switch (the successor's).
type rawHand struct {
	u *uplink
	*device.Raw
}

func (h rawHand) KeepOnClose() {
	h.u.keep.Store(true)
	h.Raw.KeepOnClose()
}

// keepOnClose makes dev's Close leave its interface, if it can be
// handed over.
func keepOnClose(dev vswitch.Device) {
	if h, _ := handOf(dev); h != nil {
		h.KeepOnClose()
	}
}

// heldSpec says whether a device of spec is held (its type can be).
func heldSpec(spec deviceConfig) bool {
	return spec.Type == fdTypeTAP || spec.Type == fdTypeAFPacket
}

// openOrAdopt adopts the descriptor held for spec's port if it fits spec,
// and otherwise opens the device (openDevice). how says which: "adopted"
// (the interface never lost its carrier), "reattached" or "made".
func (d *daemon) openOrAdopt(spec deviceConfig, link device.Link) (vswitch.Device, string, error) {
	if h, ok := d.held[spec.Port]; ok {
		delete(d.held, spec.Port)
		dev, err := adoptHeld(spec, link, h)
		if err == nil {
			return dev, "adopted", nil
		}
		d.log.Warn("held descriptor not adopted: closed; opening the device", "port", spec.Port, "err", err)
		// The holder's duplicate would keep the interface attached:
		// it goes first.
		d.holder.dropSync(spec.Port)
	}
	dev, reattached, err := openDevice(spec, link)
	how := "made"
	if reattached {
		how = "reattached"
	}
	return dev, how, err
}

// adoptHeld serves spec's device over h's descriptor, after checking that
// it was held as spec says and is what spec says. It takes ownership of
// the descriptor.
func adoptHeld(spec deviceConfig, link device.Link, h heldFd) (vswitch.Device, error) {
	if !heldSpec(spec) || h.msg.Type != spec.Type || h.msg.Name != spec.Name || h.msg.NetNS != spec.NetNS {
		unix.Close(h.fd)
		return nil, fmt.Errorf("held as %s %s in netns %q; the configuration has %s %s in netns %q",
			h.msg.Type, h.msg.Name, h.msg.NetNS, spec.Type, spec.Name, spec.NetNS)
	}
	link.Name, link.NetNS = spec.Name, spec.netnsPath()
	if spec.Type == fdTypeTAP {
		return device.AdoptTAP(h.fd, link)
	}
	restore, err := device.Dedicate(spec.Name, spec.netnsPath())
	if err != nil {
		unix.Close(h.fd)
		return nil, err
	}
	r, err := device.AdoptRaw(h.fd, spec.Name, spec.netnsPath())
	if err != nil {
		return nil, fmt.Errorf("%w (restoring: %v)", err, restore())
	}
	return &uplink{Uplink: r, restore: restore}, nil
}

// releaseHeld closes the descriptors held that no port adopted (a port
// that is not in the configuration) and has the holder close its own.
func (d *daemon) releaseHeld() {
	for _, port := range slices.Sorted(maps.Keys(d.held)) {
		h := d.held[port]
		unix.Close(h.fd)
		d.holder.drop(port)
		d.sd.drop(port)
		d.log.Warn("held descriptor of a port the configuration has no such device for: closed",
			"port", port, "type", h.msg.Type, "name", h.msg.Name, "netns", h.msg.NetNS)
	}
	d.held = nil
}

// hold gives the holder a duplicate of the descriptor of port's device
// (d.mu held), if the device is one it holds.
func (d *daemon) hold(port string) {
	o := d.devs[port]
	if (d.holder == nil && d.sd == nil) || o == nil || !heldSpec(o.spec) {
		return
	}
	h, typ := handOf(o.dev)
	if h == nil || typ != o.spec.Type {
		return
	}
	m := fdMsg{Op: opPut, Port: port, Type: typ, Name: o.spec.Name, NetNS: o.spec.NetNS}
	h.Control(func(fd uintptr) {
		d.holder.put(m, int(fd))
		d.sd.put(m, int(fd))
	})
}

// unhold has the holder close what it holds for port (d.mu held), unless
// the devices are handed over.
func (d *daemon) unhold(port string) {
	if !d.handedOver.Load() {
		d.holder.drop(port)
		d.sd.drop(port)
	}
}

// keepHolder starts a new holder whenever the one ufpd uses dies, and
// gives it the descriptors of every device, until ctx ends: the pods
// keep their carrier through a later crash of ufpd. A holder that cannot
// be started is tried again every holderRetry.
func (d *daemon) keepHolder(ctx context.Context) {
	if d.holder == nil {
		return
	}
	for {
		d.mu.Lock()
		lost := d.holder.lost
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-lost:
		}
		for {
			d.mu.Lock()
			if d.stopped || d.handedOver.Load() || d.holder.quitting {
				d.mu.Unlock()
				return
			}
			err := d.reconnectHolder()
			d.mu.Unlock()
			if err == nil {
				break
			}
			d.log.Error("descriptor holder gone; a crash would now take the pods' carrier", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(holderRetry):
			}
		}
	}
}

// holderRetry is how long ufpd waits before it tries again to start a
// holder that would not start.
const holderRetry = 5 * time.Second

// reconnectHolder connects to a holder again (starting one), with d.mu
// held, and has it hold every device.
func (d *daemon) reconnectHolder() error {
	hc, held, err := connectHolder(d.holder.path, d.log)
	if err != nil {
		return err
	}
	// A holder found running holds nothing of this ufpd's: what it
	// holds is stale.
	closeHeld(held)
	for port := range held {
		hc.drop(port)
	}
	d.holder = hc
	hc.startWatch()
	for _, port := range slices.Sorted(maps.Keys(d.devs)) {
		d.hold(port)
	}
	d.log.Warn("descriptor holder was gone: a new one holds the devices", "socket", hc.path, "devices", len(d.devs))
	return nil
}

// inheritDevices connects to c's descriptor holder (starting one if none
// runs) and returns the descriptors it holds. Without a holder (off, or
// one that cannot be reached or started, which is logged) ufpd runs as
// before: a crash then takes the pods' carrier.
func inheritDevices(c *config, log *slog.Logger) inherited {
	if ns := os.Getenv("NOTIFY_SOCKET"); ns != "" && c.holder != "off" {
		return inheritFromSystemd(c, ns, log)
	}
	path := c.holderPath()
	if path == "" {
		return inherited{}
	}
	hc, held, err := connectHolder(path, log)
	if err != nil {
		log.Error("no descriptor holder; a crash of ufpd will take the pods' carrier", "err", err)
		return inherited{}
	}
	return inherited{holder: hc, held: held}
}

// inheritFromSystemd takes the descriptors systemd's store passed, and
// the store for the devices from now on.
func inheritFromSystemd(c *config, notify string, log *slog.Logger) inherited {
	sd, err := newSDStore(notify, log)
	if err != nil {
		log.Error("systemd's descriptor store not used; a restart of ufpd will take the pods' carrier", "err", err)
		return inherited{}
	}
	held, skipped, err := listenFds(os.Getenv, os.Getpid())
	if err != nil {
		log.Error("descriptors from systemd not taken", "err", err)
	}
	for _, name := range skipped {
		log.Warn("descriptor from systemd not ufpd's: closed", "name", name)
	}
	// The store keeps only the port and type: the configuration says the
	// rest, and the adoption checks the descriptor against it.
	for _, spec := range c.devices {
		if h, ok := held[spec.Port]; ok && h.msg.Type == spec.Type {
			h.msg.Name, h.msg.NetNS = spec.Name, spec.NetNS
			held[spec.Port] = h
		}
	}
	log.Info("systemd's descriptor store in use", "notify", notify, "held", len(held))
	return inherited{sd: sd, held: held}
}
