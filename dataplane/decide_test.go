package dataplane

import "testing"

// part is a piece of connection state that counts its releases.
type part struct{ released int }

func (p *part) Release() { p.released++ }

func TestDecisionHoldKeep(t *testing.T) {
	for _, tt := range []struct {
		name         string
		parts        int
		drop         DropReason
		revalidating bool
		dry          bool
		kept         bool // the parts become d.State, unreleased
	}{
		{name: "none held", parts: 0, kept: true},
		{name: "one part is the state itself", parts: 1, kept: true},
		{name: "two parts in one holder", parts: 2, kept: true},
		{name: "a drop releases", parts: 2, drop: DropTransposition},
		{name: "a revalidation releases what it made", parts: 1, revalidating: true},
		{name: "a dry decision releases", parts: 1, dry: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var v View
			d := Decision{Revalidating: tt.revalidating}
			d.Begin(&v, nil, tt.dry)
			ps := make([]*part, tt.parts)
			for i := range ps {
				ps[i] = &part{}
				d.Hold(ps[i])
			}
			d.Drop = tt.drop
			d.Keep()
			for i, p := range ps {
				if want := map[bool]int{true: 0, false: 1}[tt.kept]; p.released != want {
					t.Errorf("part %d released %d times, want %d", i, p.released, want)
				}
			}
			got := StateParts(d.State)
			if !tt.kept || tt.parts == 0 {
				if d.State != nil {
					t.Fatalf("State %v, want none", d.State)
				}
				return
			}
			if len(got) != tt.parts {
				t.Fatalf("State has %d parts, want %d", len(got), tt.parts)
			}
			if tt.parts == 1 && d.State != Releaser(ps[0]) {
				t.Errorf("State %v, want the part itself", d.State)
			}
			d.State.(Releaser).Release()
			for i, p := range ps {
				if p.released != 1 {
					t.Errorf("after the connection's release, part %d released %d times, want 1", i, p.released)
				}
			}
		})
	}
}

type otherPart struct{ part }

func TestDecisionPriorOnce(t *testing.T) {
	a, b := &part{}, &otherPart{}
	var held Decision
	held.Begin(&View{}, nil, false)
	held.Hold(a)
	held.Hold(b)
	held.Keep()

	// Revalidating the connection: each part is found by its kind, once.
	d := Decision{State: held.State, Revalidating: true}
	d.Begin(&View{}, nil, false)
	isPart := func(r Releaser) bool { _, ok := r.(*part); return ok }
	isOther := func(r Releaser) bool { _, ok := r.(*otherPart); return ok }
	if got := d.Prior(isOther); got != Releaser(b) {
		t.Fatalf("Prior(other) = %v, want %v", got, b)
	}
	if got := d.Prior(isOther); got != nil {
		t.Fatalf("Prior(other) again = %v, want nil: claimed once", got)
	}
	if got := d.Prior(isPart); got != Releaser(a) {
		t.Fatalf("Prior(part) = %v, want %v", got, a)
	}
	d.Keep()
	if a.released != 0 || b.released != 0 || d.State != held.State {
		t.Fatalf("a revalidation released the connection's own state or replaced it")
	}

	type tag struct{}
	var e Decision
	e.Begin(&View{}, nil, false)
	if !e.Once(tag{}) || e.Once(tag{}) {
		t.Fatal("Once: want true the first time, false after")
	}
	if !e.Once(struct{ n int }{1}) {
		t.Fatal("Once: another tag is new")
	}
}

// TestDecisionWorkNoAllocs: a decision's working state costs nothing.
func TestDecisionWorkNoAllocs(t *testing.T) {
	var v View
	d := &Decision{}
	p := &part{}
	n := testing.AllocsPerRun(100, func() {
		*d = Decision{}
		d.Begin(&v, nil, false)
		d.Hold(p)
		d.Once(struct{}{})
		t := Transposition{}
		d.Transpose(&t)
		d.Drop = DropTransposition
		d.Keep()
	})
	if n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
}
