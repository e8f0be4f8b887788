package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/vswitch"
)

// maxBody bounds a request body; maxBatchBody, that of POST /v1/batch.
// A node agent's whole sync of 10,000 dual-stack Services, each two load
// balancers with 10 remote backends, is 20,000 load balancers and 200,000
// remote endpoints, about 61 MB of JSON (TestBatchSizeBound builds it);
// single-stack, half that. 128 MiB takes it with room and bounds what one
// request makes ufpd hold.
const (
	maxBody      = 4 << 20
	maxBatchBody = 128 << 20
)

// listenAPI listens on the Unix socket at path, readable and writable by
// ufpd's user only. A socket file left by a ufpd that died is replaced;
// one a running ufpd answers on is an error.
func listenAPI(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api.socket: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("api.socket: another process listens on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api.socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return l, nil
}

// serveAPI serves the API on l until ctx ends, then removes the socket.
func (d *daemon) serveAPI(ctx context.Context, l net.Listener) error {
	defer func() {
		if !d.handedOver.Load() { // else the successor's now
			os.Remove(l.Addr().String())
		}
	}()
	return serveHTTP(ctx, l, d.handler(), d.log)
}

// serveHTTP serves h on l until ctx ends, then shuts down, giving
// requests under way two seconds to finish. The server's own errors (a
// connection it could not serve) go to log as warnings, not to the log
// package's default logger.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// postRestart is a graceful restart (docs/UFPD.md, "Restarts"): it
// answers once the successor serves, or with why it does not (ufpd then
// serves on).
func (d *daemon) postRestart(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.RestartRequest
	if err := decode(r, "restart", &req); err != nil {
		return nil, err
	}
	if req.Binary != "" && !filepath.IsAbs(req.Binary) {
		return nil, errorf(http.StatusBadRequest, "restart", "binary %q is not an absolute path", req.Binary)
	}
	return d.restart(req.Binary)
}

// handler returns the API's routes (docs/API.md).
func (d *daemon) handler() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, fn func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			v, err := fn(w, r)
			d.answer(w, r, v, err)
		})
	}
	h("GET /v1/status", d.getStatus)
	h("GET /v1/config", d.getConfig)
	h("POST /v1/restart", d.postRestart)
	h("PUT /v1/config", d.putConfig)
	h("POST /v1/batch", d.postBatch)

	routeCollection(h, d, "/v1/networks", networks)

	h("GET /v1/endpoints", d.listEndpoints)
	h("POST /v1/endpoints", d.createEndpoint)
	h("GET /v1/endpoints/{name}", d.getEndpoint)
	h("PUT /v1/endpoints/{name}", d.putEndpoint)
	h("DELETE /v1/endpoints/{name}", d.deleteEndpoint)
	h("GET /v1/endpoints/{name}/policies", d.listPolicies)
	h("POST /v1/endpoints/{name}/policies", d.addPolicy)
	h("PUT /v1/endpoints/{name}/policies", d.setPolicies)
	h("DELETE /v1/endpoints/{name}/policies/{index}", d.deletePolicy)

	routeCollection(h, d, "/v1/loadbalancers", loadBalancers)
	readCollection(h, d, "/v1/routes", "{name...}", routes)

	d.inspectRoutes(h, mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.answer(w, r, nil, errorf(http.StatusNotFound, "", "%s %s: no such API call (see docs/API.md)", r.Method, r.URL.Path))
	})
	return mux
}

// answer writes v (or err) as the JSON response, with the running
// revision in the ETag header.
func (d *daemon) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	d.mu.Lock()
	rev := d.rev
	d.mu.Unlock()
	w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(rev, 10)))
	if err != nil {
		e := api.Error{Message: err.Error()}
		status := http.StatusInternalServerError
		var ae *apiError
		if errors.As(err, &ae) {
			status, e.Object = ae.status, ae.object
		}
		if status >= 500 {
			d.log.Error("api", "method", r.Method, "path", r.URL.Path, "err", err)
		} else if r.Method != http.MethodGet {
			d.log.Info("api request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		}
		writeJSON(w, status, e)
		return
	}
	status := http.StatusOK
	switch {
	case v == nil:
		w.WriteHeader(http.StatusNoContent)
		return
	case r.Method == http.MethodPost && !slices.Contains(postsCreateNothing, r.URL.Path):
		status = http.StatusCreated
	}
	writeJSON(w, status, v)
}

// postsCreateNothing are the POST calls that answer 200, not 201.
var postsCreateNothing = []string{"/v1/trace", "/v1/restart", "/v1/batch"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // traces print packets as "a > b"
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b.Reset()
		json.NewEncoder(&b).Encode(api.Error{Message: err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// decode reads r's JSON body into v strictly: unknown fields, trailing
// data and bodies over maxBody are errors naming the object.
func decode(r *http.Request, object string, v any) error {
	return decodeLimit(r, object, v, maxBody)
}

// decodeLimit is decode with a bound of limit bytes. The body is decoded
// as it is read, not read whole first: a batch of tens of megabytes is
// held once (in the decoder's buffer), not twice. A body known to be too
// large is not read at all; one found too large is read to its end (at
// most limit+1 bytes) and refused whatever it holds, as a body read whole
// first would be.
func decodeLimit(r *http.Request, object string, v any, limit int) error {
	if r.ContentLength > int64(limit) {
		return errorf(http.StatusRequestEntityTooLarge, object, "the body is larger than %d bytes", limit)
	}
	body := &bodyReader{r: io.LimitReader(r.Body, int64(limit)+1)}
	err := decodeBody(body, v)
	if _, rerr := io.Copy(io.Discard, body); rerr != nil && body.err == nil {
		body.err = rerr
	}
	switch {
	case body.err != nil:
		return errorf(http.StatusBadRequest, object, "reading the body: %v", body.err)
	case body.n > int64(limit):
		return errorf(http.StatusRequestEntityTooLarge, object, "the body is larger than %d bytes", limit)
	case errors.Is(err, io.EOF) && !body.nonSpace:
		return errorf(http.StatusBadRequest, object, "the request needs a JSON body")
	case errors.Is(err, errTrailing):
		return errorf(http.StatusBadRequest, object, "unexpected data after the JSON document")
	case err != nil:
		return decodeError(object, err)
	}
	return nil
}

// errTrailing is decodeBody's error for data after the JSON value.
var errTrailing = errors.New("data after the JSON document")

// decodeBody decodes the one JSON value r holds into v strictly (unknown
// fields are errors).
func decodeBody(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	return nil
}

// decodeError is the API's error for err, the decoding of a body.
func decodeError(object string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, object, "malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, object, "malformed JSON: the document ends early")
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return errorf(http.StatusBadRequest, object, "%s: %v", field, err)
	}
	return errorf(http.StatusBadRequest, object, "%v", err)
}

// bodyReader counts the bytes read through it, notes whether any was
// not white space, and keeps the error of a read that failed (not
// io.EOF).
type bodyReader struct {
	r        io.Reader
	n        int64
	nonSpace bool
	err      error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if !b.nonSpace && len(bytes.TrimSpace(p[:n])) > 0 {
		b.nonSpace = true
	}
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// ifMatch returns the revision a write was made against, if it says.
func ifMatch(r *http.Request) string { return r.Header.Get("If-Match") }

// changed is the answer to an accepted change.
type changed struct {
	Revision   uint64 `json:"revision"`
	Generation uint64 `json:"generation"`
}

func (d *daemon) accepted(rev uint64, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return changed{Revision: rev, Generation: d.sw.Generation()}, nil
}

// snapshot returns the running policy document and devices (read-only).
func (d *daemon) snapshot() (*vswitch.Config, []deviceConfig) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.policy, d.cfg.devices
}

func (d *daemon) getStatus(w http.ResponseWriter, r *http.Request) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return api.Status{
		PID: os.Getpid(), Generation: d.sw.Generation(), Revision: d.rev, Replaced: d.replaced, State: d.cfg.state,
		Restored: d.restored, Ports: len(d.sw.Ports()), Devices: len(d.devs), Metrics: d.cfg.metrics.Listen,
	}, nil
}

func (d *daemon) getConfig(w http.ResponseWriter, r *http.Request) (any, error) {
	doc, devs := d.snapshot()
	pol, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out := api.Config{Policy: pol, Devices: make([]api.Device, len(devs))}
	for i, dc := range devs {
		out.Devices[i] = api.Device(dc)
	}
	return out, nil
}

func (d *daemon) putConfig(w http.ResponseWriter, r *http.Request) (any, error) {
	var in api.Config
	if err := decode(r, "config", &in); err != nil {
		return nil, err
	}
	if len(in.Policy) == 0 {
		return nil, errorf(http.StatusBadRequest, "config", "policy: the configuration needs a policy document")
	}
	return d.accepted(d.change("config", ifMatch(r), func(dr *draft) error {
		doc, err := vswitch.ParseConfig(in.Policy)
		if err != nil {
			return errorf(http.StatusBadRequest, "config", "policy: %v", err)
		}
		dr.doc, dr.replaces = doc, true
		dr.devs = make([]deviceConfig, len(in.Devices))
		for i, dev := range in.Devices {
			dr.devs[i] = deviceConfig(dev)
		}
		return nil
	}))
}

// findByName returns the index of the element of s named name, or -1.
func findByName[T any](s []T, name string, nameOf func(*T) string) int {
	for i := range s {
		if nameOf(&s[i]) == name {
			return i
		}
	}
	return -1
}

func endpointName(e *hns.EndpointConfig) string { return e.Name }

// named checks the Name of an object in a body against the URL's, and
// fills it in if the body leaves it out.
func named(object string, body *string, url string) error {
	switch *body {
	case "":
		*body = url
	case url:
	default:
		return errorf(http.StatusBadRequest, object, "Name: %q differs from the URL's %q (objects are not renamed: delete and create)", *body, url)
	}
	return nil
}

// listEndpoints lists the endpoints, those of one owner with ?owner=
// (empty: those without an owner), remote or local ones with
// ?remote=true or false.
func (d *daemon) listEndpoints(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	owner, byOwner := q.Get("owner"), q.Has("owner")
	var remote, byRemote bool
	switch v := q.Get("remote"); v {
	case "":
	case "true", "false":
		remote, byRemote = v == "true", true
	default:
		return nil, errorf(http.StatusBadRequest, "", "remote: %q is not true or false", v)
	}
	doc, devs := d.snapshot()
	out := []api.Endpoint{}
	for i := range doc.Endpoints {
		ec := &doc.Endpoints[i]
		if byOwner && ec.Owner != owner || byRemote && (ec.Flags&hns.EndpointFlagRemote != 0) != remote {
			continue
		}
		out = append(out, d.endpoint(ec, devs))
	}
	return out, nil
}

func (d *daemon) getEndpoint(w http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	doc, devs := d.snapshot()
	i := findByName(doc.Endpoints, name, endpointName)
	if i < 0 {
		return nil, errorf(http.StatusNotFound, "endpoint "+name, "no such endpoint")
	}
	return d.endpoint(&doc.Endpoints[i], devs), nil
}

// endpoint returns ec as the API shows it: with its device and status.
func (d *daemon) endpoint(ec *hns.EndpointConfig, devs []deviceConfig) api.Endpoint {
	e := api.Endpoint{EndpointConfig: *ec}
	if i := slices.IndexFunc(devs, func(dc deviceConfig) bool { return dc.Port == ec.Name }); i >= 0 {
		dev := api.Device(devs[i])
		dev.Port = ""
		e.Device = &dev
	}
	d.endpointStatus(&e)
	return e
}

func (d *daemon) createEndpoint(w http.ResponseWriter, r *http.Request) (any, error) {
	var e api.Endpoint
	if err := decode(r, "endpoint", &e); err != nil {
		return nil, err
	}
	if e.Name == "" {
		return nil, errorf(http.StatusBadRequest, "endpoint", "Name: an endpoint needs a name")
	}
	object := "endpoint " + e.Name
	return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
		if err := hnsLevel(dr); err != nil {
			return err
		}
		if findByName(dr.doc.Endpoints, e.Name, endpointName) >= 0 {
			return errorf(http.StatusConflict, object, "Name: an endpoint of that name exists")
		}
		if err := checkEndpointDevice(object, &e); err != nil {
			return err
		}
		dr.doc.Endpoints = append(dr.doc.Endpoints, e.EndpointConfig)
		dr.setDevice(e.Name, e.Device)
		return nil
	}))
}

// checkEndpointDevice checks what the configuration's own checks cannot
// name for an endpoint: a device that names another port. (An interface
// that another port's device has is refused by the configuration's
// check.)
func checkEndpointDevice(object string, e *api.Endpoint) error {
	if e.Device != nil && e.Device.Port != "" && e.Device.Port != e.Name {
		return errorf(http.StatusBadRequest, object, "Device.port: %q is not the endpoint's name (leave it out)", e.Device.Port)
	}
	return nil
}

func (d *daemon) putEndpoint(w http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	object := "endpoint " + name
	var e api.Endpoint
	if err := decode(r, object, &e); err != nil {
		return nil, err
	}
	if err := named(object, &e.Name, name); err != nil {
		return nil, err
	}
	return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
		i := findByName(dr.doc.Endpoints, name, endpointName)
		if i < 0 {
			return errorf(http.StatusNotFound, object, "no such endpoint")
		}
		if err := checkEndpointDevice(object, &e); err != nil {
			return err
		}
		dr.doc.Endpoints[i] = e.EndpointConfig
		dr.setDevice(name, e.Device)
		return nil
	}))
}

// deleteEndpoint removes an endpoint, its device (the interface ufpd
// made goes with it) and its place among load balancers' backends.
// without returns names without name: names itself if it has none, else
// a copy (names is the running document's list, which a draft must not
// change).
func without(names []string, name string) []string {
	if !slices.Contains(names, name) {
		return names
	}
	return slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == name })
}

func (d *daemon) deleteEndpoint(w http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	object := "endpoint " + name
	return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
		i := findByName(dr.doc.Endpoints, name, endpointName)
		if i < 0 {
			return errorf(http.StatusNotFound, object, "no such endpoint")
		}
		dr.doc.Endpoints = slices.Delete(dr.doc.Endpoints, i, i+1)
		dr.setDevice(name, nil)
		for j := range dr.doc.LoadBalancers {
			lb := &dr.doc.LoadBalancers[j]
			lb.HostComputeEndpoints = without(lb.HostComputeEndpoints, name)
			lb.DrainingEndpoints = without(lb.DrainingEndpoints, name)
		}
		return nil
	}))
}

// withEndpoint runs fn on the draft's endpoint named by the URL.
func (d *daemon) withEndpoint(r *http.Request, fn func(e *hns.EndpointConfig) error) (any, error) {
	name := r.PathValue("name")
	object := "endpoint " + name
	return d.accepted(d.change(object, ifMatch(r), func(dr *draft) error {
		i := findByName(dr.doc.Endpoints, name, endpointName)
		if i < 0 {
			return errorf(http.StatusNotFound, object, "no such endpoint")
		}
		return fn(dr.ownEndpoint(i))
	}))
}

func (d *daemon) listPolicies(w http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	doc, _ := d.snapshot()
	i := findByName(doc.Endpoints, name, endpointName)
	if i < 0 {
		return nil, errorf(http.StatusNotFound, "endpoint "+name, "no such endpoint")
	}
	return nonNil(doc.Endpoints[i].Policies), nil
}

func (d *daemon) addPolicy(w http.ResponseWriter, r *http.Request) (any, error) {
	var p api.Policy
	if err := decode(r, "endpoint "+r.PathValue("name")+" policy", &p); err != nil {
		return nil, err
	}
	return d.withEndpoint(r, func(e *hns.EndpointConfig) error {
		e.Policies = append(e.Policies, p)
		return nil
	})
}

func (d *daemon) setPolicies(w http.ResponseWriter, r *http.Request) (any, error) {
	var ps []api.Policy
	if err := decode(r, "endpoint "+r.PathValue("name")+" policies", &ps); err != nil {
		return nil, err
	}
	return d.withEndpoint(r, func(e *hns.EndpointConfig) error {
		e.Policies = ps
		return nil
	})
}

func (d *daemon) deletePolicy(w http.ResponseWriter, r *http.Request) (any, error) {
	object := "endpoint " + r.PathValue("name")
	idx, err := strconv.Atoi(r.PathValue("index"))
	if err != nil || idx < 0 {
		return nil, errorf(http.StatusBadRequest, object, "Policies[%s]: not a policy index", r.PathValue("index"))
	}
	return d.withEndpoint(r, func(e *hns.EndpointConfig) error {
		if idx >= len(e.Policies) {
			return errorf(http.StatusNotFound, object, "Policies[%d]: the endpoint has %d policies", idx, len(e.Policies))
		}
		e.Policies = slices.Delete(e.Policies, idx, idx+1)
		return nil
	})
}

// nonNil makes an empty list answer [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
