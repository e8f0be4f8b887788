package main

import (
	"net/http"
	"slices"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/vswitch"
)

// collection is a list of named HNS objects in the policy document that
// the API reads, creates, replaces and deletes as a whole (networks, load
// balancers). Endpoints carry a device and a status and have handlers of
// their own.
type collection[T any] struct {
	kind string // "network": how errors name an object
	of   func(doc *vswitch.Config) *[]T
	name func(*T) *string
	// inUse, if set, refuses a delete (a network that endpoints are on).
	inUse func(doc *vswitch.Config, name string) error
	// owner, if set, is an object's Owner: a listing takes ?owner=.
	owner func(*T) string
}

var networks = collection[api.Network]{
	kind: "network",
	of:   func(doc *vswitch.Config) *[]api.Network { return &doc.Networks },
	name: func(n *api.Network) *string { return &n.Name },
	inUse: func(doc *vswitch.Config, name string) error {
		var on []string
		for _, e := range doc.Endpoints {
			if e.HostComputeNetwork == name {
				on = append(on, e.Name)
			}
		}
		if len(on) > 0 {
			return errorf(http.StatusConflict, "network "+name, "endpoints are on it: %v (delete them first)", on)
		}
		return nil
	},
}

var loadBalancers = collection[api.LoadBalancer]{
	kind:  "load balancer",
	of:    func(doc *vswitch.Config) *[]api.LoadBalancer { return &doc.LoadBalancers },
	name:  func(lb *api.LoadBalancer) *string { return &lb.Name },
	owner: func(lb *api.LoadBalancer) string { return lb.Owner },
}

// routeCollection adds the five calls of collection c under path.
func routeCollection[T any](h func(string, func(http.ResponseWriter, *http.Request) (any, error)), d *daemon, path string, c collection[T]) {
	readCollection(h, d, path, "{name}", c)
	writeCollection(h, d, path, c)
}

// readCollection adds the two GET calls of collection c under path, an
// object's name in the path's last wildcard (wild: "{name}", or
// "{name...}" for names with slashes).
func readCollection[T any](h func(string, func(http.ResponseWriter, *http.Request) (any, error)), d *daemon, path, wild string, c collection[T]) {
	h("GET "+path, func(w http.ResponseWriter, r *http.Request) (any, error) {
		doc, _ := d.snapshot()
		q := r.URL.Query()
		if c.owner == nil || !q.Has("owner") {
			return nonNil(*c.of(doc)), nil
		}
		// Objects of one owner (empty: those without an owner).
		owner := q.Get("owner")
		out := []T{}
		list := *c.of(doc)
		for i := range list {
			if c.owner(&list[i]) == owner {
				out = append(out, list[i])
			}
		}
		return out, nil
	})
	h("GET "+path+"/"+wild, func(w http.ResponseWriter, r *http.Request) (any, error) {
		doc, _ := d.snapshot()
		name := r.PathValue("name")
		i := c.find(*c.of(doc), name)
		if i < 0 {
			return nil, c.notFound(name)
		}
		return (*c.of(doc))[i], nil
	})
}

// writeCollection adds the three calls that write collection c under
// path (POST, PUT and DELETE).
func writeCollection[T any](h func(string, func(http.ResponseWriter, *http.Request) (any, error)), d *daemon, path string, c collection[T]) {
	h("POST "+path, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var v T
		if err := decode(r, c.kind, &v); err != nil {
			return nil, err
		}
		name := *c.name(&v)
		if name == "" {
			return nil, errorf(http.StatusBadRequest, c.kind, "Name: a %s needs a name", c.kind)
		}
		object := c.kind + " " + name
		return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
			if err := hnsLevel(dr); err != nil {
				return err
			}
			list := c.of(dr.doc)
			if c.find(*list, name) >= 0 {
				return errorf(http.StatusConflict, object, "Name: a %s of that name exists", c.kind)
			}
			*list = append(*list, v)
			return nil
		}))
	})
	h("PUT "+path+"/{name}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		name := r.PathValue("name")
		object := c.kind + " " + name
		var v T
		if err := decode(r, object, &v); err != nil {
			return nil, err
		}
		if err := named(object, c.name(&v), name); err != nil {
			return nil, err
		}
		return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
			list := c.of(dr.doc)
			i := c.find(*list, name)
			if i < 0 {
				return c.notFound(name)
			}
			(*list)[i] = v
			return nil
		}))
	})
	h("DELETE "+path+"/{name}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		name := r.PathValue("name")
		return d.accepted(d.change(c.kind+" "+name, ifMatch(r), func(dr *draft) error {
			list := c.of(dr.doc)
			i := c.find(*list, name)
			if i < 0 {
				return c.notFound(name)
			}
			if c.inUse != nil {
				if err := c.inUse(dr.doc, name); err != nil {
					return err
				}
			}
			*list = slices.Delete(*list, i, i+1)
			return nil
		}))
	})
}

func (c collection[T]) find(list []T, name string) int {
	return findByName(list, name, func(v *T) string { return *c.name(v) })
}

func (c collection[T]) notFound(name string) error {
	return errorf(http.StatusNotFound, c.kind+" "+name, "no such %s", c.kind)
}
