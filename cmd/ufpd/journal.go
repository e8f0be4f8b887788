package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// The state file's journal. Rewriting and syncing the whole state (tens
// of megabytes for a node with thousands of Services) on every change
// would cost a change hundreds of milliseconds; a change persists instead
// only what it changed, appended to the journal beside the state file
// (PATH.journal) and synced before the change is answered. The state file
// is the base the journal follows; at start the journal is replayed onto
// it. When the journal outgrows half its base, on a change that would
// write more than a fraction of it, and when ufpd stops cleanly, the
// whole configuration is written as a new base (compaction, as writeState
// always did: a temporary file renamed over the old) and a new journal
// started.
//
// The journal is journalMagic, then frames: a payload's length and its
// CRC-32C (little-endian uint32s), then the payload (JSON). The first
// frame is the header (journalHeader): the base it follows, named by its
// revision, length and checksum; a journal that does not follow the base
// beside it (left by a compaction cut short) is ignored whole. Each other
// frame is one change (journalRecord), its revision the one after the
// last. A reader stops at the first frame that is cut short, fails its
// checksum or its decoding, or is not the next revision: the records
// before it are applied, none of that one, and what is dropped is
// logged and counted (the restore report's journal).

const (
	journalMagic = "UFPDJRN1"
	// maxJournalFrame bounds a frame's payload: a longer length is
	// corruption, not a record.
	maxJournalFrame = 1 << 30
	// journalMinLimit is the least a journal may grow to before it is
	// compacted, whatever the size of its base.
	journalMinLimit = 1 << 20
)

var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// journalPath is the journal of the state file at state.
func journalPath(state string) string { return state + ".journal" }

// baseInfo names a base: the revision it holds and its length and
// CRC-32C.
type baseInfo struct {
	Revision uint64 `json:"revision"`
	Length   int64  `json:"length"`
	CRC      uint32 `json:"crc"`
}

func baseOf(b []byte, rev uint64) baseInfo {
	return baseInfo{Revision: rev, Length: int64(len(b)), CRC: crc32.Checksum(b, journalCRC)}
}

// journalHeader is a journal's first frame.
type journalHeader struct {
	Base baseInfo `json:"base"`
}

// journalRecord is one change: the objects it created or replaced (each
// replaced in its place, or appended if new) and the names of those it
// deleted; the rest of the policy (switch, ports, uplink, networks) and
// the devices, whole, if it changed them.
type journalRecord struct {
	Revision            uint64                   `json:"revision"`
	Head                *vswitch.Config          `json:"head,omitempty"`
	Devices             *[]deviceConfig          `json:"devices,omitempty"`
	Endpoints           []hns.EndpointConfig     `json:"endpoints,omitempty"`
	DeleteEndpoints     []string                 `json:"deleteEndpoints,omitempty"`
	LoadBalancers       []hns.LoadBalancerConfig `json:"loadBalancers,omitempty"`
	DeleteLoadBalancers []string                 `json:"deleteLoadBalancers,omitempty"`
	Routes              []hns.RemoteRouteConfig  `json:"routes,omitempty"`
	DeleteRoutes        []string                 `json:"deleteRoutes,omitempty"`
}

// appendFrame appends payload p framed: its length and CRC-32C, then p.
func appendFrame(b, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, journalCRC))
	return append(b, p...)
}

// journalScan is what a journal held for its base.
type journalScan struct {
	records []journalRecord
	// end is where the valid part ends: the header and records applied
	// (0: nothing of the file follows the base).
	end int64
	// dropped is the bytes after end, and why the reader stopped there
	// ("" if it read to the end).
	dropped int64
	why     string
}

// scanJournal reads journal b as following base. It never fails: what
// cannot be read is dropped, and said why.
func scanJournal(b []byte, base baseInfo) journalScan {
	s := journalScan{dropped: int64(len(b))}
	if len(b) == 0 {
		return s
	}
	if !bytes.HasPrefix(b, []byte(journalMagic)) {
		s.why = "not a ufpd journal"
		return s
	}
	off := len(journalMagic)
	p, n, why := nextFrame(b[off:])
	if why != "" {
		s.why = "header: " + why
		return s
	}
	var h journalHeader
	if err := strictJSON(p, &h); err != nil {
		s.why = "header: " + err.Error()
		return s
	}
	if h.Base != base {
		s.why = fmt.Sprintf("it follows another base (revision %d, %d bytes), not the state file's (revision %d, %d bytes)",
			h.Base.Revision, h.Base.Length, base.Revision, base.Length)
		return s
	}
	off += n
	s.end, s.dropped = int64(off), int64(len(b)-off)
	next := base.Revision + 1
	for off < len(b) {
		p, n, why := nextFrame(b[off:])
		if why != "" {
			s.why = fmt.Sprintf("record at byte %d: %s", off, why)
			return s
		}
		var r journalRecord
		if err := strictJSON(p, &r); err != nil {
			s.why = fmt.Sprintf("record at byte %d: %v", off, err)
			return s
		}
		if r.Revision != next {
			s.why = fmt.Sprintf("record at byte %d: revision %d, not the next (%d)", off, r.Revision, next)
			return s
		}
		s.records = append(s.records, r)
		off += n
		next++
		s.end, s.dropped = int64(off), int64(len(b)-off)
	}
	return s
}

// nextFrame returns the payload of the frame b starts with and the
// frame's length, or why there is no whole, intact frame there.
func nextFrame(b []byte) (payload []byte, n int, why string) {
	if len(b) < 8 {
		return nil, 0, "cut short"
	}
	l := binary.LittleEndian.Uint32(b)
	if l > maxJournalFrame {
		return nil, 0, fmt.Sprintf("length %d", l)
	}
	if uint64(len(b)-8) < uint64(l) {
		return nil, 0, "cut short"
	}
	p := b[8 : 8+l]
	if crc32.Checksum(p, journalCRC) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, "bad checksum"
	}
	return p, 8 + int(l), ""
}

// strictJSON decodes p, one JSON value with no unknown fields, into v.
func strictJSON(p []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the record")
	}
	return nil
}

// apply makes record r's change to policy pol and devices devs.
func (r *journalRecord) apply(pol *vswitch.Config, devs *[]deviceConfig) {
	if h := r.Head; h != nil {
		pol.Switch, pol.Ports, pol.Uplink, pol.Networks = h.Switch, h.Ports, h.Uplink, h.Networks
	}
	if r.Devices != nil {
		*devs = *r.Devices
	}
	pol.Endpoints = replay(pol.Endpoints, r.Endpoints, r.DeleteEndpoints, endpointName)
	pol.LoadBalancers = replay(pol.LoadBalancers, r.LoadBalancers, r.DeleteLoadBalancers, lbName)
	pol.Routes = replay(pol.Routes, r.Routes, r.DeleteRoutes, routeName)
}

func lbName(lb *hns.LoadBalancerConfig) string { return lb.Name }

// replay deletes the objects named by deletes from list, then replaces
// each of writes in its place, or appends it if list has none of its
// name.
func replay[T any](list, writes []T, deletes []string, name func(*T) string) []T {
	if len(writes) == 0 && len(deletes) == 0 {
		return list
	}
	del := make(map[string]bool, len(deletes))
	for _, n := range deletes {
		del[n] = true
	}
	at := make(map[string]int, len(writes))
	for j := range writes {
		at[name(&writes[j])] = -1
	}
	out := make([]T, 0, len(list)+len(writes))
	for i := range list {
		n := name(&list[i])
		if del[n] {
			continue
		}
		if _, ok := at[n]; ok {
			at[n] = len(out)
		}
		out = append(out, list[i])
	}
	for j := range writes {
		if i := at[name(&writes[j])]; i >= 0 {
			out[i] = writes[j]
		} else {
			out = append(out, writes[j])
		}
	}
	return out
}

// diffList returns what turns prev into cur as replay does it: the
// objects written (changed in their place, or appended) and the names
// deleted. prev and cur each name an object once. cur is walked beside
// prev: objects in the same order cost a comparison each; those of prev
// cur has not are deleted; from the first object of cur out of prev's
// order on, cur's objects are all written (appended) and the rest of
// prev's deleted. The result is cur's objects matched in order, then the
// rest of cur: replayed onto prev, it is cur.
func diffList[T any](prev, cur []T, name func(*T) string, same func(a, b *T) bool) (writes []T, deletes []string) {
	const window = 8 // objects deleted in a row that are found without a map
	var inCur map[string]bool
	i, j := 0, 0
	for j < len(cur) && i < len(prev) {
		n := name(&cur[j])
		if name(&prev[i]) == n {
			if !same(&prev[i], &cur[j]) {
				writes = append(writes, cur[j])
			}
			i++
			j++
			continue
		}
		// prev[i] is gone, or cur[j] is out of prev's order. prev's
		// objects up to cur[j]'s name, if near, are gone (one of them
		// in cur further on is then deleted here and appended there).
		k := i + 1
		for k < len(prev) && k <= i+window && name(&prev[k]) != n {
			k++
		}
		if k < len(prev) && k <= i+window {
			for ; i < k; i++ {
				deletes = append(deletes, name(&prev[i]))
			}
			continue
		}
		if inCur == nil {
			inCur = nameSet(cur, name)
		}
		if !inCur[name(&prev[i])] {
			deletes = append(deletes, name(&prev[i]))
			i++
			continue
		}
		break // out of order: everything from here is deleted and appended
	}
	for ; i < len(prev); i++ {
		deletes = append(deletes, name(&prev[i]))
	}
	return append(writes, cur[j:]...), deletes
}

// nameSet returns the set of the names of list's objects.
func nameSet[T any](list []T, name func(*T) string) map[string]bool {
	m := make(map[string]bool, len(list))
	for i := range list {
		m[name(&list[i])] = true
	}
	return m
}

// journal writes the state: compactions (a new base and an empty journal
// after it) and records appended. The zero value has written nothing: its
// first write is a compaction. Not safe for concurrent use (the daemon
// holds d.mu).
type journal struct {
	state string   // the state file written to
	f     *os.File // the journal, open for writing (nil: none usable)
	end   int64    // the journal's valid bytes
	base  baseInfo // the base the journal follows
	// persisted is the configuration the state holds, and head its
	// policy's head (switch, ports, uplink, networks) encoded.
	persisted *config
	head      []byte
	// limit is the journal's length that makes the next change compact
	// (0: half the base, at least journalMinLimit).
	limit int64
	// scratch is reused for a record's frame.
	scratch []byte
}

// resume makes j carry on the journal a start read (scan, after base) for
// c, the configuration read back: the next change appends after the
// records read, dropping what was not. A journal that does not follow
// the base (or none) is left alone until the next change compacts. The
// file is opened at the first change: until a graceful restart's
// successor takes over, its predecessor may still write.
func (j *journal) resume(c *config, base baseInfo, scan journalScan) {
	*j = journal{state: c.state, base: base, persisted: c, end: scan.end}
	j.head, _ = encodeHead(c.policy)
}

// persist makes c, at revision rev, the persisted state: a record of
// what changed since the last, or a compaction if there is no journal to
// append to, the record is large or the journal long. On error the state
// on disk is what it was (or, for a compaction, whole: the old or the
// new) and j can be used again.
func (j *journal) persist(c *config, rev uint64) error { return j.persistDraft(c, rev, nil) }

// persistDraft is persist for c made by draft dr (nil: unknown): if dr
// is tracked and made from the persisted policy, the record holds the
// objects dr wrote and deleted, found from its edits, not by comparing
// the lists.
func (j *journal) persistDraft(c *config, rev uint64, dr *draft) error {
	if j.persisted == nil || j.end == 0 || j.state != c.state || j.base.Revision >= rev {
		return j.compact(c, rev)
	}
	if dr != nil && (!dr.tracked || dr.base != j.persisted.policy) {
		dr = nil
	}
	rec, head, err := j.record(c, rev, dr)
	if err != nil {
		return err
	}
	if rec == nil {
		return j.compact(c, rev) // it changes most of the state
	}
	limit := j.limit
	if limit == 0 {
		limit = max(j.base.Length/2, journalMinLimit)
	}
	if j.end+int64(len(rec)) > limit {
		return j.compact(c, rev)
	}
	if err := j.append(rec); err != nil {
		return err
	}
	j.persisted, j.head = c, head
	return nil
}

// record returns the frame of c's change at revision rev since
// j.persisted, and c's head encoded; no frame if the change writes or
// deletes more than a quarter of the objects.
func (j *journal) record(c *config, rev uint64, dr *draft) (frame, head []byte, err error) {
	prev := j.persisted
	r := journalRecord{Revision: rev}
	if dr != nil {
		head = j.head // a tracked draft shares the head (change)
	} else if head, err = encodeHead(c.policy); err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(head, j.head) {
		r.Head = &vswitch.Config{Switch: c.policy.Switch, Ports: c.policy.Ports, Uplink: c.policy.Uplink, Networks: c.policy.Networks}
	}
	if !slices.Equal(prev.devices, c.devices) {
		devs := c.devices
		if devs == nil {
			devs = []deviceConfig{}
		}
		r.Devices = &devs
	}
	if dr != nil {
		r.Endpoints = editWrites(&dr.eps, prev.policy.Endpoints, c.policy.Endpoints, hns.SameEndpoint)
		r.DeleteEndpoints = editDeletes(&dr.eps, prev.policy.Endpoints, endpointName)
		r.LoadBalancers = editWrites(&dr.lbs, prev.policy.LoadBalancers, c.policy.LoadBalancers, hns.SameLoadBalancer)
		r.DeleteLoadBalancers = editDeletes(&dr.lbs, prev.policy.LoadBalancers, lbName)
	} else {
		r.Endpoints, r.DeleteEndpoints = diffList(prev.policy.Endpoints, c.policy.Endpoints, endpointName, hns.SameEndpoint)
		r.LoadBalancers, r.DeleteLoadBalancers = diffList(prev.policy.LoadBalancers, c.policy.LoadBalancers, lbName, hns.SameLoadBalancer)
	}
	// Routes, hundreds at most, are compared whole.
	r.Routes, r.DeleteRoutes = diffList(prev.policy.Routes, c.policy.Routes, routeName, sameRoute)
	n := len(r.Endpoints) + len(r.DeleteEndpoints) + len(r.LoadBalancers) + len(r.DeleteLoadBalancers) + len(r.Routes) + len(r.DeleteRoutes)
	if n > 64 && n > (len(c.policy.Endpoints)+len(c.policy.LoadBalancers)+len(c.policy.Routes))/4 {
		return nil, head, nil // a first sync, say: not worth a record
	}
	p, err := json.Marshal(&r)
	if err != nil {
		return nil, nil, err
	}
	j.scratch = appendFrame(j.scratch[:0], p)
	return j.scratch, head, nil
}

// encodeHead encodes policy c but its endpoints and load balancers.
func encodeHead(c *vswitch.Config) ([]byte, error) {
	return json.Marshal(&vswitch.Config{Switch: c.Switch, Ports: c.Ports, Uplink: c.Uplink, Networks: c.Networks})
}

// append appends frame to the journal and syncs it. If that fails, the
// journal is cut back to where it was; if that fails too, it is given up
// and the next change compacts.
func (j *journal) append(frame []byte) error {
	if j.f == nil {
		f, err := os.OpenFile(journalPath(j.state), os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		// What a start did not read (a torn record) goes: records
		// after it would not be read either.
		if err := f.Truncate(j.end); err != nil {
			f.Close()
			return fmt.Errorf("journal: %w", err)
		}
		j.f = f
	}
	_, err := j.f.WriteAt(frame, j.end)
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		if j.f.Truncate(j.end) != nil || j.f.Sync() != nil {
			j.close()
		}
		return fmt.Errorf("journal: %w", err)
	}
	j.end += int64(len(frame))
	return nil
}

// compact writes c at revision rev as a new base, then an empty journal
// following it. A crash between the two leaves the new base with the old
// journal, which does not follow it and is ignored.
func (j *journal) compact(c *config, rev uint64) error {
	base, err := writeBase(c, rev)
	if err != nil {
		return err
	}
	head, err := encodeHead(c.policy)
	if err != nil {
		return err
	}
	hp, err := json.Marshal(journalHeader{Base: base})
	if err != nil {
		return err
	}
	jb := appendFrame([]byte(journalMagic), hp)
	f, err := createAtomic(journalPath(c.state), jb)
	if err != nil {
		// The new base stands without a journal: the next change
		// compacts again.
		j.close()
		*j = journal{limit: j.limit}
		return fmt.Errorf("journal: %w", err)
	}
	j.close()
	*j = journal{state: c.state, f: f, end: int64(len(jb)), base: base, persisted: c, head: head, limit: j.limit}
	return nil
}

// writeBase writes c at revision rev as the state file, whole, streamed
// to it (writeStateTo), and returns it named as a base.
func writeBase(c *config, rev uint64) (baseInfo, error) {
	base := baseInfo{Revision: rev}
	f, err := createAtomicWith(c.state, func(w io.Writer) error {
		h := crc32.New(journalCRC)
		cw := &countWriter{w: io.MultiWriter(w, h)}
		if err := writeStateTo(cw, c, rev); err != nil {
			return err
		}
		base.Length, base.CRC = cw.n, h.Sum32()
		return nil
	})
	if err != nil {
		return baseInfo{}, err
	}
	return base, f.Close()
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// close closes the journal's file, if open.
func (j *journal) close() {
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// createAtomic writes b to a temporary file beside path, syncs it,
// renames it over path and syncs the directory. It returns the file, open
// for writing.
func createAtomic(path string, b []byte) (*os.File, error) {
	return createAtomicWith(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// createAtomicWith is createAtomic with the file's content written by
// write.
func createAtomicWith(path string, write func(w io.Writer) error) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		err = write(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeFileAtomic is createAtomic closing the file.
func writeFileAtomic(path string, b []byte) error {
	f, err := createAtomic(path, b)
	if err != nil {
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
