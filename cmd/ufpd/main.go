package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo" {
		return demo(args[1:], stdout, stderr)
	}
	if len(args) == 1 && args[0] == "fdholder" {
		// Started by ufpd itself (see holder_linux.go), not by hand.
		return holderMain(stderr)
	}
	fl := flag.NewFlagSet("ufpd", flag.ContinueOnError)
	fl.SetOutput(stderr)
	path := fl.String("config", "", "configuration file (JSON: policy and devices)")
	check := fl.Bool("check", false, "validate the configuration and exit")
	cpuProfile := fl.String("cpuprofile", "", "write a CPU profile (go tool pprof) of the whole run to this `file`")
	showStatePath := fl.String("show-state", "", "print the state a start would restore from this state `file` (its journal replayed) and exit")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: ufpd -config FILE [-check] [-cpuprofile FILE]\n       ufpd -show-state FILE\n       ufpd demo [-h]\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *showStatePath != "" {
		if *path != "" || *check || *cpuProfile != "" || fl.NArg() > 0 {
			fl.Usage()
			return 2
		}
		return showState(*showStatePath, stdout, stderr)
	}
	if *path == "" || fl.NArg() > 0 {
		fl.Usage()
		return 2
	}
	c, rev, fromState, err := loadRunning(*path)
	if err != nil {
		fmt.Fprintf(stderr, "ufpd: %v\n", err)
		return 2
	}
	if *check {
		from := *path
		if fromState {
			from = c.state
		}
		fmt.Fprintf(stdout, "%s: valid (%d devices)\n", from, len(c.devices))
		return 0
	}
	log := newLogger(stderr, c.log)
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "ufpd: -cpuprofile: %v\n", err)
			return 2
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemonMain(ctx, *path, c, rev, fromState, log); err != nil {
		log.Error("ufpd stopped", "err", err)
		return 1
	}
	return 0
}

// startCPUProfile starts profiling the process's CPU use into the file
// at path; the function returned stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func newLogger(w io.Writer, lc logConfig) *slog.Logger {
	level, _ := logLevel(lc.Level) // validated
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// daemonMain runs the daemon until ctx ends, reloading path on SIGHUP.
// c is the configuration to start from: the file's, or the state file's
// (fromState) at revision rev.
func daemonMain(ctx context.Context, path string, c *config, rev uint64, fromState bool, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A graceful restart's successor is handed its devices and
	// listeners by its predecessor, which serves until it takes over.
	pred, err := predecessor()
	if err != nil {
		return err
	}
	handed := &handedIn{}
	if pred != nil {
		if handed, err = receiveHandoff(pred); err != nil {
			failTo(pred, err)
			return err
		}
		log.Info("graceful restart: devices and listeners handed over", "devices", len(handed.devs), "listeners", len(handed.listeners))
	}
	fail := func(err error) error {
		if pred != nil {
			failTo(pred, err)
		}
		return err
	}
	apiL, metricsL := handed.listeners["api"], handed.listeners["metrics"]
	if c.api.Socket != "" && apiL == nil {
		l, err := listenAPI(c.api.Socket)
		if err != nil {
			return fail(err)
		}
		apiL = l
	}
	if c.metrics.Listen != "" && metricsL == nil {
		l, err := net.Listen("tcp", c.metrics.Listen)
		if err != nil {
			if apiL != nil {
				apiL.Close()
			}
			return fail(fmt.Errorf("metrics.listen: %w", err))
		}
		metricsL = l
	}
	closeListeners := func() {
		for _, l := range []net.Listener{apiL, metricsL} {
			if l != nil {
				l.Close()
			}
		}
	}
	if c.state != "" {
		removeStaleTemps(c.state)
	}
	in := inheritDevices(c, log)
	if pred != nil {
		// The holder holds the same devices: the predecessor's copies
		// are the ones to adopt.
		closeHeld(in.held)
		in.held, in.noConns, in.borrowed = handed.devs, true, true
	}
	var d *daemon
	if fromState {
		d, err = restoreDaemonFrom(c, rev, log, in)
	} else {
		d, err = newDaemonFrom(c, log, in)
	}
	if err == nil && pred != nil {
		if err = d.takeOver(pred); err != nil {
			d.mu.Lock()
			d.closeAll() // leaves the devices to the predecessor
			d.mu.Unlock()
		}
	}
	if err != nil {
		if pred != nil {
			in.holder.detach() // the predecessor serves on with it
		} else {
			in.holder.abandon()
		}
		in.sd.close()
		closeListeners()
		return fail(err)
	}
	d.stopServing = cancel
	d.listeners = map[string]net.Listener{}
	for name, l := range map[string]net.Listener{"api": apiL, "metrics": metricsL} {
		if l != nil {
			d.listeners[name] = l
		}
	}
	d.holder.startWatch()
	defer func() {
		// After serve: the devices are closed (or handed over).
		if d.handedOver.Load() {
			d.holder.detach()
		} else {
			d.holder.quit()
		}
		d.sd.close()
	}()
	if c.state != "" && !fromState {
		// The file seeds the state: from now on the state file is the
		// configuration.
		d.mu.Lock()
		err := d.jr.persist(c, 0)
		d.mu.Unlock()
		if err != nil {
			d.closeAll()
			closeListeners()
			return fmt.Errorf("state: %w", err)
		}
		log.Info("state seeded from the configuration file", "state", c.state)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if apiL != nil {
		wg.Go(func() {
			if err := d.serveAPI(ctx, apiL); err != nil {
				log.Error("api stopped", "err", err)
			}
		})
		log.Info("api listening", "socket", c.api.Socket)
	}
	if metricsL != nil {
		wg.Go(func() {
			if err := d.serveMetrics(ctx, metricsL); err != nil {
				log.Error("metrics stopped", "err", err)
			}
		})
		log.Info("metrics listening", "address", metricsL.Addr().String())
	}
	if c.state != "" {
		wg.Go(func() { d.saveConns(ctx, connsPath(c.state)) })
	}
	wg.Go(func() { d.keepHolder(ctx) })
	hup, usr2 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if len(restartSignals) > 0 {
		signal.Notify(usr2, restartSignals...)
	}
	defer signal.Stop(hup)
	defer signal.Stop(usr2)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				d.reloadFile(path)
			case <-usr2:
				// A graceful restart onto this executable; it logs
				// its outcome.
				d.restart("")
			}
		}
	}()
	if pred != nil {
		pred.send(fdMsg{Op: opServing}, -1)
		pred.c.Close()
	}
	log.Info("ufpd serving", "config", path, "ports", len(d.sw.Ports()), "devices", len(c.devices), "pid", os.Getpid())
	err = d.serve(ctx)
	log.Info("ufpd stopped", "device_failures", d.sw.DeviceFailures())
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// reloadFile reloads the configuration at path (and the state file, if
// it names one that exists), logging the outcome.
func (d *daemon) reloadFile(path string) {
	c, _, _, err := loadRunning(path)
	if err == nil {
		err = d.reload(c)
	} else {
		err = fmt.Errorf("%w: %w", errRejected, err)
	}
	if err != nil {
		d.log.Error("reload", "config", path, "err", err)
	}
}
