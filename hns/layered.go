package hns

import "maps"

// layered is a map that the lowerings Update makes share: a base, never
// written once a version is forked from it, and a version's own changes
// over it. Forking costs the changes since the base, not the map: the
// maps of every remote endpoint and of how many times load balancers
// list each endpoint (100,000s at 10,000 Services) are not copied for a
// change of a few. A fork whose changes outgrow an eighth of the base
// starts from a new base with them merged, so lookups stay one or two
// map reads and the copies cost O(1) a change, amortised.
type layered[K comparable, V any] struct {
	base  map[K]V
	delta map[K]layer[V] // nil: the base is this version's own, written in place
	n     int            // the keys present
}

// layer is a key's value in a version, or its deletion.
type layer[V any] struct {
	v    V
	gone bool
}

// newLayered returns an empty map, written in place until forked.
func newLayered[K comparable, V any]() layered[K, V] {
	return layered[K, V]{base: map[K]V{}}
}

// get returns k's value and whether k is present.
func (m *layered[K, V]) get(k K) (V, bool) {
	if e, ok := m.delta[k]; ok {
		return e.v, !e.gone
	}
	v, ok := m.base[k]
	return v, ok
}

// set makes v the value of k.
func (m *layered[K, V]) set(k K, v V) {
	if _, ok := m.get(k); !ok {
		m.n++
	}
	if m.delta == nil {
		m.base[k] = v
		return
	}
	m.delta[k] = layer[V]{v: v}
}

// del deletes k.
func (m *layered[K, V]) del(k K) {
	if _, ok := m.get(k); !ok {
		return
	}
	m.n--
	if m.delta == nil {
		delete(m.base, k)
		return
	}
	if _, inBase := m.base[k]; inBase {
		m.delta[k] = layer[V]{gone: true}
	} else {
		delete(m.delta, k)
	}
}

// each calls f with every key present and its value, in no order.
func (m *layered[K, V]) each(f func(K, V)) {
	for k, v := range m.base {
		if _, ok := m.delta[k]; !ok {
			f(k, v)
		}
	}
	for k, e := range m.delta {
		if !e.gone {
			f(k, e.v)
		}
	}
}

// len returns the number of keys present.
func (m *layered[K, V]) len() int { return m.n }

// fork returns a version of m that changes without changing m.
func (m *layered[K, V]) fork() layered[K, V] {
	if len(m.delta) <= len(m.base)/8+64 {
		d := make(map[K]layer[V], len(m.delta)+8)
		maps.Copy(d, m.delta)
		return layered[K, V]{base: m.base, delta: d, n: m.n}
	}
	b := maps.Clone(m.base)
	for k, e := range m.delta {
		if e.gone {
			delete(b, k)
		} else {
			b[k] = e.v
		}
	}
	return layered[K, V]{base: b, delta: map[K]layer[V]{}, n: m.n}
}

// countRef adds d to the number of times load balancers list endpoint
// name.
func (l *lowering) countRef(name string, d int32) {
	n, _ := l.refs.get(name)
	if n += d; n == 0 {
		l.refs.del(name)
	} else {
		l.refs.set(name, n)
	}
}
