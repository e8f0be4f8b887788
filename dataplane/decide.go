package dataplane

// The working state of a decision that stateful actions (rules.
// StatefulAction: source NAT, load balancing) share while the slow path
// decides: the packet as the layers crossed so far left it, the composite
// transposition, the trace, the state of the connection being revalidated
// and the state the actions hold for the connection being opened. It lives
// in the Decision, which the worker owns, so that a decision allocates
// nothing for it.

// maxHeld is how many parts of connection state one decision may hold.
const maxHeld = 4

type decisionWork struct {
	view   *View
	ht     Transposition // composed so far
	trace  *Trace
	dry    bool
	prior  [maxHeld]Releaser // the revalidated connection's state, in parts
	nprior int
	taken  uint8 // prior parts claimed, by bit
	held   [maxHeld]Releaser
	nheld  int
	once   [maxHeld]any
	nonce  int
}

// Begin starts the working state of a decision on the packet v describes,
// reading the state of a revalidated connection from d.State. dry marks a
// trace's decision, which binds, registers and remembers nothing.
func (d *Decision) Begin(v *View, tr *Trace, dry bool) {
	d.work.view, d.work.trace, d.work.dry = v, tr, dry
	switch st := d.State.(type) {
	case *heldState:
		d.work.nprior = copy(d.work.prior[:], st.parts[:st.n])
	case Releaser:
		d.work.prior[0], d.work.nprior = st, 1
	}
}

// Composite returns the transposition composed so far: what the packet
// has had done to it since the decision began.
func (d *Decision) Composite() *Transposition { return &d.work.ht }

// View returns the packet as the layers crossed so far have left it.
func (d *Decision) View() *View { return d.work.view }

// Trace returns the decision's trace (nil: not tracing).
func (d *Decision) Trace() *Trace { return d.work.trace }

// Dry reports whether the decision is a trace's: it must bind, register
// and remember nothing outside the decision.
func (d *Decision) Dry() bool { return d.work.dry }

// Transpose composes t into the decision's transposition and applies it
// to the packet. It reports false, with d.Drop set, if t cannot follow
// what came before or apply to the packet.
func (d *Decision) Transpose(t *Transposition) bool {
	if t.Set == 0 && t.Outer == OuterIgnore && t.Push == nil {
		return true // changes nothing, whatever its unused values hold
	}
	next, err := d.work.ht.Then(*t)
	if err == nil {
		err = d.work.view.Apply(t)
	}
	if err != nil {
		d.work.trace.Addf("transposition %s cannot apply: %v", *t, err) // a copy: t must not escape
		d.Drop = DropTransposition
		return false
	}
	d.work.ht = next
	return true
}

// Prior returns the first part of the revalidated connection's state for
// which is reports true (its caller's kind) that no action of this
// decision has claimed yet, and claims it; nil if there is none.
func (d *Decision) Prior(is func(Releaser) bool) Releaser {
	w := &d.work
	for i := range w.nprior {
		if w.taken&(1<<i) == 0 && is(w.prior[i]) {
			w.taken |= 1 << i
			return w.prior[i]
		}
	}
	return nil
}

// Hold gives st to the connection the decision opens, which keeps it and
// releases it when it leaves the flow table (Keep). A part must be the
// connection's alone, not shared with another connection: the pipeline
// tells connections' states apart by identity.
func (d *Decision) Hold(st Releaser) {
	w := &d.work
	if w.nheld == maxHeld {
		panic("dataplane: a decision holds more parts of connection state than it can keep")
	}
	w.held[w.nheld] = st
	w.nheld++
}

// Once reports whether tag (a comparable value of the caller's own type)
// is new to this decision, and records it: an action that may apply only
// once per packet (a source translation) asks before it does.
func (d *Decision) Once(tag any) bool {
	w := &d.work
	for _, t := range w.once[:w.nonce] {
		if t == tag {
			return false
		}
	}
	if w.nonce < maxHeld {
		w.once[w.nonce] = tag
		w.nonce++
	}
	return true
}

// Keep ends the working state: a decision that opens a connection (not
// dropped, not a revalidation) gives it what the actions held, as
// d.State; any other releases it all at once.
func (d *Decision) Keep() {
	w := &d.work
	if d.Drop != NotDropped || d.Revalidating || w.dry {
		for i := range w.nheld {
			w.held[i].Release()
		}
	} else {
		switch w.nheld {
		case 0:
		case 1:
			d.State = w.held[0]
		default:
			h := &heldState{n: w.nheld}
			copy(h.parts[:], w.held[:w.nheld])
			d.State = h
		}
	}
	// Forget what the decision referred to (the worker's Decision lives
	// on), clearing only the slots it used.
	clear(w.prior[:w.nprior])
	clear(w.held[:w.nheld])
	clear(w.once[:w.nonce])
	w.view, w.trace = nil, nil
	w.nprior, w.nheld, w.nonce, w.taken = 0, 0, 0, 0
}

// heldState is the state of a connection that several stateful actions
// keep.
type heldState struct {
	parts [maxHeld]Releaser
	n     int
}

// Release implements Releaser.
func (h *heldState) Release() {
	for _, p := range h.parts[:h.n] {
		p.Release()
	}
}

// StateParts returns the parts of connection state st (a Conn's or a
// Decision's State): none, the one, or each of several actions'.
func StateParts(st any) []Releaser {
	switch st := st.(type) {
	case *heldState:
		return st.parts[:st.n]
	case Releaser:
		return []Releaser{st}
	}
	return nil
}
