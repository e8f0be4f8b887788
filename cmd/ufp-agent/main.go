package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ufp-dev/ufp/agent"
	"github.com/ufp-dev/ufp/api"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs the agent until ctx ends and returns the exit status: 2 for
// invalid flags or configuration, 1 if it could not run.
func run(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	fl := flag.NewFlagSet("ufp-agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: ufp-agent --network NETWORK [--config FILE] [flags]\n\n")
		fl.PrintDefaults()
	}
	o, given, err := parse(args, fl)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var c *checked
	if err == nil {
		c, err = check(o, given, os.Hostname)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ufp-agent: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))
	rc, err := restConfig(o.Kubeconfig, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "ufp-agent: %v\n", err)
		return 2
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		fmt.Fprintf(stderr, "ufp-agent: %v\n", err)
		return 2
	}
	a, err := agent.New(agent.Config{
		NodeName:        c.nodeName,
		Kube:            kube,
		UFPD:            api.NewClient(o.UfpdSocket),
		Network:         o.Network,
		NodeIPs:         c.nodeIPs,
		ClusterCIDRs:    c.clusterCIDRs,
		SourceVIPs:      c.sourceVIPs,
		DSR:             o.EnableDSR,
		NoNetworkPolicy: !o.NetworkPolicy,
		ProxyName:       o.ProxyName,
		MinSyncPeriod:   time.Duration(o.MinSyncPeriod),
		SyncPeriod:      time.Duration(o.SyncPeriod),
		PodNetwork:      c.podNetwork,
		Log:             log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "ufp-agent: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopServers, err := serve(ctx, a, o, log)
	if err != nil {
		log.Error("cannot serve", "err", err)
		return 1
	}
	defer stopServers()
	log.Info("ufp-agent starting", "node", c.nodeName, "network", o.Network, "ufpd", o.UfpdSocket,
		"nodeIPs", c.nodeIPs, "clusterCIDRs", c.clusterCIDRs, "sourceVIPs", c.sourceVIPs, "dsr", o.EnableDSR,
		"proxyName", o.ProxyName, "networkPolicy", o.NetworkPolicy, "api", rc.Host)
	if err := a.Run(ctx); err != nil {
		log.Error("ufp-agent stopped", "err", err)
		return 1
	}
	log.Info("ufp-agent stopped; ufpd left as it is")
	return 0
}

// restConfig is the API server's client configuration: from kubeconfig
// if given, else in-cluster, else from $KUBECONFIG.
func restConfig(kubeconfig string, getenv func(string) string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	default:
		var inCluster error
		if rc, inCluster = rest.InClusterConfig(); inCluster != nil {
			env := getenv("KUBECONFIG")
			if env == "" {
				return nil, fmt.Errorf("--kubeconfig: not given, not in a cluster (%v) and $KUBECONFIG is not set", inCluster)
			}
			if rc, err = clientcmd.BuildConfigFromFlags("", env); err != nil {
				return nil, fmt.Errorf("$KUBECONFIG: %w", err)
			}
		}
	}
	rc.UserAgent = "ufp-agent"
	rc.QPS, rc.Burst = 50, 100 // informers watch; this bounds lists and Events
	return rc, nil
}

// serve starts the metrics and health servers (an empty address: not
// served; the same address: one server for both), and the profiles on
// the metrics server if o enables them.
func serve(ctx context.Context, a *agent.Agent, o *options, log *slog.Logger) (stop func(), err error) {
	metricsAddr, healthzAddr := o.MetricsBindAddress, o.HealthzBindAddress
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
		}
		return muxes[addr]
	}
	if metricsAddr != "" {
		mux(metricsAddr).Handle("GET /metrics", a.Metrics())
		if o.EnableProfiling {
			m := mux(metricsAddr)
			m.HandleFunc("/debug/pprof/", pprof.Index)
			m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			m.HandleFunc("/debug/pprof/profile", pprof.Profile)
			m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			m.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
	}
	if healthzAddr != "" {
		mux(healthzAddr).Handle("GET /healthz", a.Healthz())
		mux(healthzAddr).Handle("GET /readyz", a.Readyz())
	}
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.Shutdown(c)
			cancel()
		}
	}
	for addr, m := range muxes {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			stop()
			return nil, err
		}
		s := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
		servers = append(servers, s)
		log.Info("serving", "address", l.Addr().String())
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("server stopped", "address", addr, "err", err)
			}
		}()
	}
	return stop, nil
}
