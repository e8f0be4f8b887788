package api

import (
	"encoding/json"
	"io"
)

// chunkSize is the size of a request body's chunks.
const chunkSize = 64 << 10

// body is a request body encoded once into fixed-size chunks: it never
// copies itself to grow (encoding/json's Marshal doubles its buffer and
// then copies the result, about three times a body's size at its peak,
// tens of MB for a node agent's first batch), its length is known (the
// server sizes its buffer from Content-Length) and it can be read again
// (the transport resends a request whose idle connection was closed).
type body struct {
	chunks [][]byte
	n      int64
}

// Write appends p.
func (b *body) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(b.chunks) == 0 || len(b.chunks[len(b.chunks)-1]) == chunkSize {
			b.chunks = append(b.chunks, make([]byte, 0, chunkSize))
		}
		last := &b.chunks[len(b.chunks)-1]
		k := copy((*last)[len(*last):chunkSize], p)
		*last = (*last)[:len(*last)+k]
		p = p[k:]
	}
	b.n += int64(n)
	return n, nil
}

// reader reads the body from its start.
func (b *body) reader() io.ReadCloser { return &bodyReader{chunks: b.chunks} }

// bodyReader reads chunks (shared, read-only) from chunk i, byte off.
type bodyReader struct {
	chunks [][]byte
	i, off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	for r.i < len(r.chunks) && r.off == len(r.chunks[r.i]) {
		r.i, r.off = r.i+1, 0
	}
	if r.i == len(r.chunks) {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[r.i][r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }

// bodyEncoder is a request body that writes its JSON itself, element by
// element, rather than as one encoding/json value.
type bodyEncoder interface {
	encodeJSON(w io.Writer) error
}

// encodeBody encodes v as a request's JSON body.
func encodeBody(v any) (*body, error) {
	b := &body{}
	if e, ok := v.(bodyEncoder); ok {
		return b, e.encodeJSON(b)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	b.Write(j)
	return b, nil
}

var _ bodyEncoder = (*Batch)(nil)

// encodeJSON writes b as encoding/json writes it (the same bytes: the
// fields in their order, omitempty honoured), one object at a time.
func (b *Batch) encodeJSON(w io.Writer) error {
	enc := elementWriter{w: w}
	enc.raw(`{"owner":`)
	enc.value(b.Owner)
	if len(b.Endpoints) > 0 {
		enc.raw(`,"endpoints":`)
		list(&enc, b.Endpoints)
	}
	if len(b.LoadBalancers) > 0 {
		enc.raw(`,"loadBalancers":`)
		list(&enc, b.LoadBalancers)
	}
	if len(b.DeleteEndpoints) > 0 {
		enc.raw(`,"deleteEndpoints":`)
		list(&enc, b.DeleteEndpoints)
	}
	if len(b.DeleteLoadBalancers) > 0 {
		enc.raw(`,"deleteLoadBalancers":`)
		list(&enc, b.DeleteLoadBalancers)
	}
	if len(b.Routes) > 0 {
		enc.raw(`,"routes":`)
		list(&enc, b.Routes)
	}
	if len(b.ACLSets) > 0 {
		enc.raw(`,"aclSets":`)
		list(&enc, b.ACLSets)
	}
	if len(b.DeleteRoutes) > 0 {
		enc.raw(`,"deleteRoutes":`)
		list(&enc, b.DeleteRoutes)
	}
	if len(b.DeleteACLSets) > 0 {
		enc.raw(`,"deleteACLSets":`)
		list(&enc, b.DeleteACLSets)
	}
	enc.raw(`}`)
	return enc.err
}

// elementWriter writes JSON to w and keeps the first error.
type elementWriter struct {
	w   io.Writer
	err error
}

func (e *elementWriter) raw(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

func (e *elementWriter) value(v any) {
	if e.err != nil {
		return
	}
	j, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	_, e.err = e.w.Write(j)
}

// list writes l as a JSON array, one element at a time.
func list[T any](e *elementWriter, l []T) {
	e.raw("[")
	for i := range l {
		if i > 0 {
			e.raw(",")
		}
		e.value(&l[i])
	}
	e.raw("]")
}
