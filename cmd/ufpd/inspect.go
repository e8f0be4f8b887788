package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/inspect"
	"github.com/ufp-dev/ufp/metrics"
	"github.com/ufp-dev/ufp/vswitch"
)

// inspectRoutes adds the calls that read the compiled switch: ports,
// layers, rules, flows, counters, the trace and captures.
func (d *daemon) inspectRoutes(h func(string, func(http.ResponseWriter, *http.Request) (any, error)), mux *http.ServeMux) {
	h("GET /v1/ports", func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nonNil(d.sw.PortInfos()), nil
	})
	h("GET /v1/ports/{name}", func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := d.sw.PortInfo(r.PathValue("name"))
		return p, switchError("port "+r.PathValue("name"), err)
	})
	h("GET /v1/ports/{name}/layers", func(w http.ResponseWriter, r *http.Request) (any, error) {
		l, err := d.sw.Layers(r.PathValue("name"))
		return nonNil(l), switchError("port "+r.PathValue("name"), err)
	})
	h("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nonNil(d.sw.RuleCounters()), nil
	})
	h("GET /v1/flows", func(w http.ResponseWriter, r *http.Request) (any, error) {
		f, err := d.flowFilter(r)
		if err != nil {
			return nil, err
		}
		if r.URL.Query().Get("limit") == "" {
			f.Limit = 1000
		}
		flows, n := d.sw.Flows(f)
		return api.FlowList{Flows: nonNil(flows), Matched: n}, nil
	})
	h("DELETE /v1/flows", func(w http.ResponseWriter, r *http.Request) (any, error) {
		f, err := d.flowFilter(r)
		if err != nil {
			return nil, err
		}
		n := d.sw.FlushFlows(f)
		d.log.Info("flows flushed", "filter", r.URL.RawQuery, "removed", n)
		return api.FlushResult{Removed: n}, nil
	})
	h("GET /v1/counters", func(w http.ResponseWriter, r *http.Request) (any, error) {
		return d.sw.Stats(), nil
	})
	h("POST /v1/trace", func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req inspect.TraceRequest
		if err := decode(r, "trace", &req); err != nil {
			return nil, err
		}
		res, err := d.sw.Trace(req)
		return res, switchError("trace", err)
	})
	mux.HandleFunc("GET /v1/ports/{name}/capture", d.capture)
}

// flowFilter reads the flow filter of r's query, checked against the
// running policy.
func (d *daemon) flowFilter(r *http.Request) (inspect.FlowFilter, error) {
	f, err := api.ParseFlowFilter(r.URL.Query())
	if err != nil {
		return f, errorf(http.StatusBadRequest, "flows", "%v", err)
	}
	return f, switchError("flows", d.sw.CheckFlowFilter(f))
}

// switchError gives an error of the switch's its API status.
func switchError(object string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, vswitch.ErrNotFound):
		return errorf(http.StatusNotFound, object, "%v", err)
	}
	return errorf(http.StatusBadRequest, object, "%v", err)
}

// endpointStatus fills in e's status: its port and why its device is not
// serving, if it is not.
func (d *daemon) endpointStatus(e *api.Endpoint) {
	st := &api.EndpointStatus{}
	if p, err := d.sw.PortInfo(e.Name); err == nil {
		st.Port = &p
		if p.Device != nil && p.Device.Error != "" {
			st.DeviceError = p.Device.Error
		}
	}
	d.mu.Lock()
	if msg, ok := d.devErr[e.Name]; ok {
		st.DeviceError = msg
	}
	d.mu.Unlock()
	e.Status = st
}

// capture streams a live capture of a port as pcapng until the client
// goes away or the count is reached.
func (d *daemon) capture(w http.ResponseWriter, r *http.Request) {
	port := r.PathValue("name")
	object := "capture of port " + port
	var opt inspect.CaptureOptions
	q := r.URL.Query()
	for k, dst := range map[string]*int{"count": &opt.Count, "snaplen": &opt.Snaplen} {
		if s := q.Get(k); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				d.answer(w, r, nil, errorf(http.StatusBadRequest, object, "%s: %q is not a count", k, s))
				return
			}
			*dst = n
		}
	}
	opt.Direction = q.Get("direction") // checked by Capture, as the port is
	fw := &flushWriter{w: w, rc: http.NewResponseController(w)}
	sum, err := d.sw.Capture(r.Context(), port, fw, opt)
	if !fw.started {
		// Nothing was sent: the capture did not start.
		if err == nil {
			err = errors.New("the capture ended before it started")
		}
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, vswitch.ErrNotFound):
			status = http.StatusNotFound
		case errors.Is(err, vswitch.ErrNoDevice):
			status = http.StatusConflict
		}
		// The switch's message names the capture and the port.
		d.answer(w, r, nil, &apiError{status: status, object: object, msg: err.Error()})
		return
	}
	d.log.Info("capture ended", "port", port, "captured", sum.Captured, "dropped", sum.Dropped, "err", err)
}

// flushWriter sends every write to the client at once, the response's
// header before the first.
type flushWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (f *flushWriter) Write(b []byte) (int, error) {
	if !f.started {
		f.started = true
		f.w.Header().Set("Content-Type", "application/x-pcapng")
		f.w.WriteHeader(http.StatusOK)
	}
	n, err := f.w.Write(b)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

// serveMetrics serves the Prometheus metrics at /metrics on l until ctx
// ends.
func (d *daemon) serveMetrics(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(d.sw))
	return serveHTTP(ctx, l, mux, d.log)
}
