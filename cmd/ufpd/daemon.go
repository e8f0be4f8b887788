package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// daemon is a running switch and the devices ufpd opened for its ports.
type daemon struct {
	log *slog.Logger
	sw  *vswitch.Switch

	mu      sync.Mutex // serialises changes, reloads and shutdown
	cfg     *config
	jr      journal           // writes the state file and its journal (d.mu)
	devs    map[string]*owned // by port name
	stopped bool              // serve has returned: nothing more is opened
	// noRedirects: links' redirects are left out (linkOf), and that was
	// logged.
	noRedirects bool
	// rev counts the accepted configuration changes (persisted with the
	// state).
	rev uint64
	// names indexes the running policy's objects by name, and the
	// spares are where changes append to its lists (edits.go) (d.mu).
	names   nameIndex
	epSpare spare[hns.EndpointConfig]
	lbSpare spare[hns.LoadBalancerConfig]
	// replaced counts the accepted changes and reloads that replaced the
	// whole configuration (api.Status.Replaced).
	replaced uint64
	// devErr holds, by port, why a device of the configuration is not
	// open (it failed to open on restore or on a change).
	devErr map[string]string
	// restored reports what a start from the state file brought back.
	restored *api.RestoreReport

	// holder keeps duplicates of the devices' descriptors (nil: none);
	// held are the descriptors found held (or handed over) at start,
	// by port, until open adopts them.
	holder *holderClient
	held   map[string]heldFd
	// sd is systemd's descriptor store, used instead of a holder under
	// systemd (nil: not).
	sd *sdStore
	// handedOver is set while the devices are another process's (a
	// successor's, or until it takes over, a predecessor's): closing
	// them leaves the interfaces, and the holder is left as it is.
	handedOver atomic.Bool
	// listeners are the API's and the metrics' (by name), handed to a
	// successor; stopServing ends serve (after a hand-over).
	listeners   map[string]net.Listener
	stopServing context.CancelFunc
}

// inherited is what ufpd starts with besides its configuration: the
// holder and the descriptors of its ports' devices held for it.
type inherited struct {
	holder *holderClient
	sd     *sdStore
	held   map[string]heldFd
	// noConns: the connections are not read from the connections file
	// (a successor in a graceful restart is handed them).
	noConns bool
	// borrowed: the held descriptors are a predecessor's, which serves
	// them until the successor takes over (handedOver until then).
	borrowed bool
}

// owned is a device ufpd opened, with what it was opened from, so that a
// reload can tell whether it still fits.
type owned struct {
	spec deviceConfig
	link device.Link
	dev  vswitch.Device
}

// newDaemon starts a switch on c's policy and opens and attaches c's
// devices. On error everything opened is closed again.
func newDaemon(c *config, log *slog.Logger) (*daemon, error) {
	return newDaemonFrom(c, log, inherited{})
}

// newDaemonFrom is newDaemon adopting what in holds.
func newDaemonFrom(c *config, log *slog.Logger, in inherited) (*daemon, error) {
	sw, err := vswitch.New(c.policy)
	if err != nil {
		closeHeld(in.held)
		return nil, fmt.Errorf("policy: %w", err)
	}
	sw.SetLogger(log)
	d := &daemon{log: log, sw: sw, cfg: c, devs: map[string]*owned{}, devErr: map[string]string{},
		holder: in.holder, held: in.held, sd: in.sd}
	d.handedOver.Store(in.borrowed)
	for _, spec := range c.devices {
		if _, err := d.open(spec, sw.Port(spec.Port)); err != nil {
			d.releaseHeld()
			d.closeAll()
			return nil, err
		}
	}
	d.releaseHeld()
	return d, nil
}

// restoreDaemon starts a switch on c, the configuration read back from
// the state file, and opens its devices, taking back the interfaces that
// are still there. A device that cannot be opened (its namespace is gone)
// leaves its port without one: it is reported, not fatal, so that the
// other pods keep their network and the orchestrator can delete what is
// gone.
func restoreDaemon(c *config, rev uint64, log *slog.Logger) (*daemon, error) {
	return restoreDaemonFrom(c, rev, log, inherited{})
}

// restoreDaemonFrom is restoreDaemon adopting what in holds.
func restoreDaemonFrom(c *config, rev uint64, log *slog.Logger, in inherited) (*daemon, error) {
	sw, err := vswitch.New(c.policy)
	if err != nil {
		closeHeld(in.held)
		return nil, fmt.Errorf("%s: policy: %w", c.state, err)
	}
	sw.SetLogger(log)
	d := &daemon{log: log, sw: sw, cfg: c, rev: rev, devs: map[string]*owned{}, devErr: map[string]string{},
		holder: in.holder, held: in.held, sd: in.sd}
	d.handedOver.Store(in.borrowed)
	r := &api.RestoreReport{From: c.state, Revision: rev}
	r.Networks, r.Endpoints, r.LoadBalancers = len(c.policy.Networks), len(c.policy.Endpoints), len(c.policy.LoadBalancers)
	for _, spec := range c.devices {
		reattached, err := d.open(spec, sw.Port(spec.Port))
		switch {
		case err != nil:
			d.devErr[spec.Port] = err.Error()
			r.Failed = append(r.Failed, api.Failed{Port: spec.Port, Error: err.Error()})
			log.Error("port device not restored; the port has no device", "port", spec.Port, "err", err)
		case reattached:
			r.Reattached = append(r.Reattached, spec.Port)
		default:
			r.Recreated = append(r.Recreated, spec.Port)
		}
	}
	d.releaseHeld()
	// The connections go back before the switch serves: the replies of
	// old connections find their flows, and their NAT ports are taken
	// before any new connection can be given one.
	if !in.noConns {
		r.Connections = d.restoreConns(connsPath(c.state))
	}
	if rs := c.resume; rs != nil {
		d.jr.resume(c, rs.base, rs.scan)
		if rs.scan.end > 0 || rs.scan.dropped > 0 {
			r.Journal = &api.JournalRestored{Records: int(rev - rs.base.Revision), Dropped: rs.scan.dropped, Why: rs.scan.why}
		}
		if rs.scan.dropped > 0 {
			log.Warn("state journal: the end of it dropped; the changes before it are restored", "journal", journalPath(c.state),
				"base_revision", rs.base.Revision, "revision", rev, "dropped_bytes", rs.scan.dropped, "why", rs.scan.why)
		}
	}
	d.restored = r
	log.Info("configuration restored", "state", c.state, "revision", rev,
		"networks", r.Networks, "endpoints", r.Endpoints, "loadbalancers", r.LoadBalancers,
		"reattached", len(r.Reattached), "recreated", len(r.Recreated), "failed", len(r.Failed))
	return d, nil
}

// open opens the device spec describes for port and attaches it. It
// reports whether an interface that was there already (left by a ufpd
// that died) was taken back rather than made.
func (d *daemon) open(spec deviceConfig, port *vswitch.Port) (reattached bool, err error) {
	if err := checkNetNS(spec); err != nil {
		return false, err
	}
	link := d.linkOf(port)
	dev, how, err := d.openOrAdopt(spec, link)
	if err != nil {
		return false, fmt.Errorf("port %s: %s device %s: %w", spec.Port, spec.Type, spec.Name, err)
	}
	if err := d.sw.Attach(spec.Port, dev); err != nil {
		dev.Close()
		return false, err
	}
	if err := clearRedirects(spec, port); err != nil {
		d.log.Warn("host's vNIC: a redirect table left by an earlier ufpd not removed", "port", spec.Port, "err", err)
	}
	if how != "made" {
		gone, err := pruneRoutes(spec, port, link)
		if err != nil {
			d.log.Warn("host's vNIC: routes left by an earlier ufpd not all removed", "port", spec.Port, "err", err)
		}
		if len(gone) > 0 {
			d.log.Info("host's vNIC: routes left by an earlier ufpd removed", "port", spec.Port, "routes", len(gone))
		}
	}
	d.devs[spec.Port] = &owned{spec: spec, link: link, dev: dev}
	delete(d.devErr, spec.Port)
	d.hold(spec.Port)
	reattached = how != "made"
	attrs := []any{"port", spec.Port, "type", spec.Type, "name", spec.Name, "netns", spec.NetNS, "interface", how}
	if u, ok := dev.(interface{ uplinkIO() (string, error) }); ok {
		io, fellBack := u.uplinkIO()
		if fellBack != nil {
			d.log.Warn("uplink: AF_XDP not available, using AF_PACKET", "port", spec.Port, "reason", fellBack)
		}
		attrs = append(attrs, "io", io)
	}
	d.log.Info("port device up", attrs...)
	return reattached, nil
}

// checkNetNS reports a namespace that does not exist, before anything is
// changed.
func checkNetNS(spec deviceConfig) error {
	if p := spec.netnsPath(); p != "" {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("port %s: netns %s: %w", spec.Port, spec.NetNS, err)
		}
	}
	return nil
}

// serve runs the switch until ctx ends, then closes every device ufpd
// opened (removing the interfaces it made).
func (d *daemon) serve(ctx context.Context) error {
	err := d.sw.Serve(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	d.closeAll()
	d.compactOnStop()
	return err
}

// compactOnStop writes the state whole, its journal emptied, when ufpd
// stops with records in the journal, so that the next start reads the
// state file alone. Not after a hand-over: the state is the successor's.
func (d *daemon) compactOnStop() {
	j := &d.jr
	if d.handedOver.Load() || j.persisted == nil || j.base.Revision == d.rev {
		return
	}
	if err := j.compact(j.persisted, d.rev); err != nil {
		d.log.Warn("state: compacting the journal at stop", "state", j.state, "err", err)
		return
	}
	j.close()
}

func (d *daemon) closeAll() {
	for _, port := range slices.Sorted(maps.Keys(d.devs)) {
		o := d.devs[port]
		if d.handedOver.Load() {
			keepOnClose(o.dev)
		}
		d.sw.Detach(port)
		if err := o.dev.Close(); err != nil {
			d.log.Warn("closing port device", "port", port, "err", err)
		}
		delete(d.devs, port)
		d.unhold(port)
		d.log.Info("port device removed", "port", port, "name", o.spec.Name)
	}
}

// linkOf is port's link set-up as this machine can apply it: without
// redirects where they cannot be made (no nft), which is logged once, so
// that the host's vNIC still comes up and carries everything else (its
// Services at their ClusterIPs and external IPs).
func (d *daemon) linkOf(port *vswitch.Port) device.Link {
	l := port.Link
	if len(l.Redirects) == 0 {
		return l
	}
	if err := canRedirect(); err != nil {
		if !d.noRedirects {
			d.log.Warn("the host's node ports are not redirected: the node's own connections to them stay local", "port", port.Name, "err", err)
			d.noRedirects = true
		}
		l.Redirects = nil
	}
	return l
}

// linkUpdater is a device that changes its interface's routes and
// redirects in place (device.TAP).
type linkUpdater interface {
	UpdateLink(old, l device.Link) error
}

// updatable reports whether o's device can take link l in place: it
// differs from o's only in routes and redirects, and the device changes
// those.
func updatable(o *owned, l device.Link) bool {
	_, ok := o.dev.(linkUpdater)
	return ok && device.SameButRoutes(o.link, l)
}

// failedAs reports whether spec's port has no device because spec failed
// to open (on restore or on an earlier change).
func (d *daemon) failedAs(spec deviceConfig) bool {
	if _, failed := d.devErr[spec.Port]; !failed {
		return false
	}
	return slices.Contains(d.cfg.devices, spec)
}

// errRejected marks a reload that changed nothing.
var errRejected = errors.New("rejected; the running policy stays")

// reload makes c the running configuration: it applies the new policy
// atomically (flows the change does not touch go on undisturbed), then
// closes the devices of ports that left or whose device or link set-up
// changed, and opens the new ones. An invalid policy, or a namespace that
// does not exist, is rejected before anything changes: the running policy
// and devices stay. A device that fails to open after the policy is
// applied leaves its port without a device; the error says which.
func (d *daemon) reload(c *config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return fmt.Errorf("%w: ufpd is stopping", errRejected)
	}
	err := d.apply(c, nil)
	if !errors.Is(err, errRejected) {
		d.replaced++
	}
	return err
}

// apply is reload with d.mu held. prep, if not nil, is c's policy
// prepared by the switch (vswitch.Switch.Prepare) against the running
// one.
func (d *daemon) apply(c *config, prep *vswitch.Prepared) error {
	if prep == nil {
		var err error
		if prep, err = d.sw.Prepare(c.policy); err != nil {
			return fmt.Errorf("%w: policy: %w", errRejected, err)
		}
	}
	byName := map[string]*vswitch.Port{}
	for _, p := range prep.Ports() {
		byName[p.Name] = p
	}
	want := map[string]deviceConfig{}
	for _, spec := range c.devices {
		want[spec.Port] = spec
	}
	var open []deviceConfig
	var close, update []string
	for port, o := range d.devs {
		spec, ok := want[port]
		switch {
		case !ok || spec != o.spec:
			close = append(close, port)
		case d.linkOf(byName[port]).Equal(o.link):
		case updatable(o, d.linkOf(byName[port])):
			update = append(update, port)
		default:
			close = append(close, port)
		}
	}
	for _, spec := range c.devices {
		if o := d.devs[spec.Port]; o == nil || slices.Contains(close, spec.Port) {
			if o == nil && d.failedAs(spec) {
				// It failed to open as it is (its namespace went away,
				// say): it stays without a device rather than blocking
				// every change until it is deleted.
				continue
			}
			if err := checkNetNS(spec); err != nil {
				return fmt.Errorf("%w: %w", errRejected, err)
			}
			open = append(open, spec)
		}
	}
	if err := d.sw.Install(prep); err != nil {
		return fmt.Errorf("%w: policy: %w", errRejected, err)
	}
	d.cfg = c
	slices.Sort(update)
	for _, port := range update {
		// Routes and redirects alone (a Service's frontend, on the
		// host's vNIC): changed in place, the interface kept.
		o, l := d.devs[port], d.linkOf(d.sw.Port(port))
		from, to := o.link, l
		from.Name, from.NetNS = o.spec.Name, o.spec.netnsPath()
		to.Name, to.NetNS = from.Name, from.NetNS
		if err := o.dev.(linkUpdater).UpdateLink(from, to); err != nil {
			d.log.Error("port device's routes not updated; its device is opened again", "port", port, "err", err)
			close, open = append(close, port), append(open, o.spec)
			continue
		}
		o.link = l
	}
	slices.Sort(close)
	for _, port := range close {
		o := d.devs[port]
		d.sw.Detach(port)
		o.dev.Close()
		delete(d.devs, port)
		d.unhold(port)
		d.log.Info("port device removed", "port", port, "name", o.spec.Name)
	}
	for port := range d.devErr {
		if _, ok := want[port]; !ok {
			delete(d.devErr, port)
		}
	}
	var errs []error
	for _, spec := range open {
		if _, err := d.open(spec, d.sw.Port(spec.Port)); err != nil {
			d.log.Error("port device failed to open; the port has no device", "port", spec.Port, "err", err)
			d.devErr[spec.Port] = err.Error()
			errs = append(errs, err)
		}
	}
	d.log.Info("configuration reloaded", "generation", d.sw.Generation(), "devices", len(d.devs),
		"opened", len(open)-len(errs), "closed", len(close))
	return errors.Join(errs...)
}
