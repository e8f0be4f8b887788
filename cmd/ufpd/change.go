package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// apiError is an error with the HTTP status the API answers it with.
type apiError struct {
	status int
	object string
	msg    string
	cause  error // the first error among errorf's arguments, if any
}

func (e *apiError) Error() string { return e.msg }

// Unwrap returns the error the message was made from, so that a caller
// can find what it carries (an hns.ObjectError).
func (e *apiError) Unwrap() error { return e.cause }

func errorf(status int, object, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if object != "" {
		msg = object + ": " + msg
	}
	e := &apiError{status: status, object: object, msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			e.cause = err
			break
		}
	}
	return e
}

// draft is a copy of the running configuration that an API call changes
// before it is validated and applied. Its lists of endpoints and load
// balancers are copies, but their objects' own lists (IpConfigurations,
// Policies, HostComputeEndpoints) are the running configuration's, read
// concurrently: a change replaces them, never writes into them
// (ownEndpoint).
//
// A tracked draft (trackedChange) copies nothing of the running policy:
// its document shares the running one's switch settings, ports, uplink,
// networks and lists of endpoints and load balancers, which the change
// does not write; it replaces the lists by edited (batch.go's merge),
// recording what it did in eps and lbs (edits.go).
type draft struct {
	doc  *vswitch.Config
	devs []deviceConfig
	// replaces: the change replaces the whole configuration.
	replaces bool

	tracked  bool
	base     *vswitch.Config // the running policy the draft was made from
	eps, lbs listEdits
	names    *nameIndex // base's (tracked drafts)
	// listed says how many times base's load balancers list an
	// endpoint (ok false: it cannot say).
	listed  func(name string) (n int, ok bool)
	epSpare *spare[hns.EndpointConfig]
	lbSpare *spare[hns.LoadBalancerConfig]
}

// device returns the index of port's device in the draft, or -1.
func (dr *draft) device(port string) int {
	return slices.IndexFunc(dr.devs, func(d deviceConfig) bool { return d.Port == port })
}

// setDevice makes dev (nil: none) the device of port.
func (dr *draft) setDevice(port string, dev *api.Device) {
	i := dr.device(port)
	if dev == nil {
		if i >= 0 {
			dr.devs = slices.Delete(dr.devs, i, i+1)
		}
		return
	}
	dc := deviceConfig(*dev)
	dc.Port = port
	if i >= 0 {
		dr.devs[i] = dc
	} else {
		dr.devs = append(dr.devs, dc)
	}
}

// change makes a copy of the running configuration, lets fn change it,
// and makes the result the running configuration: validated as a
// configuration file is, compiled and applied atomically, then persisted
// to the state file. If anything fails the running configuration stays
// as it was (a device that failed to open is closed again and the policy
// put back) and the error says what and where. ifMatch, if not empty, is
// the revision the change was made against: another change since is a
// conflict. It returns the new revision.
func (d *daemon) change(object, ifMatch string, fn func(dr *draft) error) (uint64, error) {
	return d.changeDraft(object, ifMatch, false, fn)
}

// trackedChange is change with a tracked draft: fn changes the lists of
// endpoints and load balancers through merge only.
func (d *daemon) trackedChange(object, ifMatch string, fn func(dr *draft) error) (uint64, error) {
	return d.changeDraft(object, ifMatch, true, fn)
}

// changeDraft is change, its draft tracked or not.
func (d *daemon) changeDraft(object, ifMatch string, tracked bool, fn func(dr *draft) error) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.handedOver.Load() {
		// After a hand-over the state is the successor's to write.
		return 0, errorf(http.StatusServiceUnavailable, "", "ufpd is stopping")
	}
	if ifMatch != "" {
		want, err := strconv.ParseUint(strings.Trim(ifMatch, `"`), 10, 64)
		if err != nil {
			return 0, errorf(http.StatusBadRequest, "", "If-Match: %q is not a revision", ifMatch)
		}
		if want != d.rev {
			return 0, errorf(http.StatusPreconditionFailed, object, "changed meanwhile: revision %d is running, the change was made against %d", d.rev, want)
		}
	}
	cur := d.cfg
	dr := &draft{devs: slices.Clone(cur.devices), base: cur.policy}
	if tracked {
		doc := *cur.policy
		dr.doc, dr.tracked, dr.names = &doc, true, d.names.of(cur.policy)
		dr.epSpare, dr.lbSpare = &d.epSpare, &d.lbSpare
		dr.listed = func(name string) (int, bool) { return d.sw.Listed(cur.policy, name) }
		defer d.epSpare.abort() // after commit, nothing to forget
		defer d.lbSpare.abort()
	} else {
		doc, err := draftPolicy(cur.policy)
		if err != nil {
			return 0, err
		}
		dr.doc = doc
	}
	if err := fn(dr); err != nil {
		return 0, err
	}
	c, prep, err := d.validate(dr)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, object, "%v", err)
	}
	if err := d.apply(c, prep); err != nil {
		if errors.Is(err, errRejected) {
			return 0, errorf(http.StatusBadRequest, object, "%v", err)
		}
		d.rollback(cur)
		return 0, errorf(http.StatusBadRequest, object, "%v; the change was undone", err)
	}
	if c.state != "" {
		if err := d.jr.persistDraft(c, d.rev+1, dr); err != nil {
			d.rollback(cur)
			return 0, errorf(http.StatusInternalServerError, object, "persisting to %s: %v; the change was undone", c.state, err)
		}
	}
	if tracked {
		d.epSpare.commit()
		d.lbSpare.commit()
		d.names.follow(cur.policy, c.policy, &dr.eps, &dr.lbs)
	}
	d.rev++
	if dr.replaces {
		d.replaced++
	}
	return d.rev, nil
}

// draftPolicy copies policy c for a draft: the switch settings, ports,
// uplink and networks whole (vswitch.Config.Clone), the lists of
// endpoints and load balancers (the bulk of a node's document: copying
// their objects' lists too cost a change at 10,000 Services 18 ms) one
// level deep.
func draftPolicy(c *vswitch.Config) (*vswitch.Config, error) {
	doc, err := (&vswitch.Config{Switch: c.Switch, Ports: c.Ports, Uplink: c.Uplink, Networks: c.Networks}).Clone()
	if err != nil {
		return nil, err
	}
	doc.Endpoints, doc.LoadBalancers = slices.Clone(c.Endpoints), slices.Clone(c.LoadBalancers)
	doc.Routes = slices.Clone(c.Routes)
	return doc, nil
}

// ownEndpoint gives the draft's endpoint i lists of its own, which a
// change may then write into.
func (dr *draft) ownEndpoint(i int) *hns.EndpointConfig {
	e := &dr.doc.Endpoints[i]
	*e = hns.CloneEndpoints(dr.doc.Endpoints[i : i+1])[0]
	return e
}

// validate turns a draft into a configuration, checked as a file is
// (with the daemon's own settings kept), and its policy prepared by the
// switch against the running one: compiled once, and incrementally when
// the draft changes load balancers' backends and remote endpoints alone.
// The draft's document is a copy of the running one (change), or for a
// tracked draft the running one with edited lists (trackedChange): no
// text goes back and forth.
func (d *daemon) validate(dr *draft) (*config, *vswitch.Prepared, error) {
	cur := d.cfg
	c := &config{policy: dr.doc, devices: dr.devs, log: cur.log, api: cur.api, state: cur.state, metrics: cur.metrics, holder: cur.holder}
	var ed *hns.Edits
	if dr.tracked {
		// The running policy's settings are compact; the change's own
		// are compacted (their arrays are the change's).
		eps := c.policy.Endpoints
		for _, k := range dr.eps.replaced {
			i := dr.eps.newIndex(k)
			(&vswitch.Config{Endpoints: eps[i : i+1]}).CompactSettings()
		}
		(&vswitch.Config{Endpoints: eps[len(eps)-dr.eps.added:]}).CompactSettings()
		ed = hnsEdits(&dr.eps, &dr.lbs, len(eps))
	} else {
		c.policy.CompactSettings()
	}
	prep, err := d.sw.PrepareEdits(c.policy, dr.base, ed)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	uplinks := map[string]bool{}
	for _, p := range prep.Ports() {
		uplinks[p.Name] = p.Uplink
	}
	if err := checkDevices(c.devices, uplinks); err != nil {
		return nil, nil, err
	}
	return c, prep, nil
}

// rollback puts configuration c back after a change failed half way.
func (d *daemon) rollback(c *config) {
	if err := d.apply(c, nil); err != nil {
		d.log.Error("putting the configuration back after a failed change", "err", err)
	}
}

// hnsLevel checks that the running policy document is HNS level; the API's
// objects (networks, endpoints, load balancers) exist only there.
func hnsLevel(dr *draft) error {
	if !dr.doc.IsHNS() && len(dr.doc.Ports) > 0 {
		return errorf(http.StatusConflict, "", "the running policy is VFP level (ports): networks, endpoints and load balancers are HNS objects; replace the whole configuration with PUT /v1/config")
	}
	return nil
}
