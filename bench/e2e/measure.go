package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
)

// metric is one figure measured in a round.
type metric int

const (
	tcp1Gbps        metric = iota // TCP, 1 stream: Gbit/s received by pod B (iperf3)
	tcp4Gbps                      // TCP, 4 streams
	framesDelivered               // 64-byte UDP frames per second received at pod B's eth0
	framesSent                    // 64-byte UDP frames per second pod A's eth0 took (tx packets + tx dropped)
	cpuPerFrameUs                 // switch CPU time per delivered frame, µs
	cpuCoresTCP1                  // switch CPU during TCP 1 stream, in cores
	cpuCoresTCP4                  // during TCP 4 streams
	cpuCoresUDP                   // during the UDP count
	pingMs                        // average ping RTT from pod A to pod B, ms
	numMetrics
)

// sample holds the figures of one round on one testbed. A figure not
// measured (a test that failed, the CPU of the kernel's switch) is NaN.
type sample [numMetrics]float64

func newSample() sample {
	var s sample
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// The tests' settings.
const (
	pingCount    = 20
	pingInterval = "0.05"
	udpPayload   = 18 // bytes: + UDP 8 + IPv4 20 + Ethernet 14 + FCS 4 = 64
)

// measureRound runs the round's tests on b, in order: ping, TCP with 1
// and 4 streams, UDP. A test that fails leaves its figures NaN and adds
// its error; the others still run (unless ctx ends).
func measureRound(ctx context.Context, r *runner, b *testbed, seconds int) (sample, []error) {
	s := newSample()
	tests := []struct {
		name string
		run  func() error
	}{
		{"ping", func() error { return measurePing(ctx, r, b, &s) }},
		{"TCP 1 stream", func() error { return measureTCP(ctx, r, b, seconds, 1, &s) }},
		{"TCP 4 streams", func() error { return measureTCP(ctx, r, b, seconds, 4, &s) }},
		{"UDP 64 B", func() error { return measureUDP(ctx, r, b, seconds, &s) }},
	}
	var errs []error
	for _, t := range tests {
		if err := t.run(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
		}
		if err := sleep(ctx, pause); err != nil {
			break
		}
	}
	if b.alive != nil {
		if err := b.alive(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errs
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// measurePing records the average RTT of pingCount pings from pod A to
// pod B.
func measurePing(ctx context.Context, r *runner, b *testbed, s *sample) error {
	argv := inNetns(b.podA, "ping", "-q", "-n", "-c", strconv.Itoa(pingCount), "-i", pingInterval, "-w", "10", b.target)
	out, err := r.output(ctx, 15*time.Second, argv...)
	p, perr := parsePing(out)
	if perr != nil {
		return errors.Join(err, perr)
	}
	s[pingMs] = p.avgMs
	if p.received < p.transmitted {
		return fmt.Errorf("%d of %d replies (the average is of those)", p.received, p.transmitted)
	}
	return nil
}

// iperfClient returns the argv of an iperf3 client in pod A to pod B's
// server, for seconds, with extra arguments.
func iperfClient(b *testbed, seconds int, extra ...string) []string {
	argv := []string{"iperf3", "-c", b.target, "-p", iperfPort, "-t", strconv.Itoa(seconds), "-J", "--connect-timeout", "3000"}
	return inNetns(b.podA, append(argv, extra...)...)
}

// iperfTimeout bounds an iperf3 client run of seconds.
func iperfTimeout(seconds int) time.Duration {
	return time.Duration(seconds)*time.Second + 20*time.Second
}

// measureTCP records the TCP throughput of an iperf3 run with streams
// streams, and the switch's CPU use during it.
func measureTCP(ctx context.Context, r *runner, b *testbed, seconds, streams int, s *sample) error {
	gbps, cores := tcp1Gbps, cpuCoresTCP1
	if streams > 1 {
		gbps, cores = tcp4Gbps, cpuCoresTCP4
	}
	cpu0, hasCPU, err := b.cpuTime()
	if err != nil {
		return err
	}
	t0 := time.Now()
	out, err := r.output(ctx, iperfTimeout(seconds), iperfClient(b, seconds, "-P", strconv.Itoa(streams))...)
	elapsed := time.Since(t0)
	cpu1, _, cerr := b.cpuTime()
	bps, perr := parseIperf(out)
	if perr != nil {
		return errors.Join(err, perr)
	}
	s[gbps] = bps / 1e9
	if hasCPU && cerr == nil {
		s[cores] = (cpu1 - cpu0).Seconds() / elapsed.Seconds()
	}
	return cerr
}

// udpMargin is the part at each end of a UDP run that the frame count
// leaves out (start-up, the control exchange, the end of the run).
func udpMargin(seconds int) time.Duration {
	return min(time.Second, time.Duration(seconds)*time.Second/5)
}

// measureUDP runs an iperf3 UDP client in pod A sending 64-byte frames as
// fast as it can, and counts the frames at the pods' interfaces, and the
// switch's CPU time, over the middle of the run (without udpMargin at
// either end). iperf3's own receive figures are not used: they measure
// the iperf3 receiver more than the switch.
func measureUDP(ctx context.Context, r *runner, b *testbed, seconds int, s *sample) error {
	var stdout, stderr bytes.Buffer
	argv := iperfClient(b, seconds, "-u", "-l", strconv.Itoa(udpPayload), "-b", "0")
	c, err := r.start(argv, &stdout, &stderr)
	if err != nil {
		return err
	}
	defer c.stop() // no-op once it has exited
	margin := udpMargin(seconds)
	if err := sleep(ctx, margin); err != nil {
		return err
	}
	first, err := readCounters(ctx, r, b)
	if err != nil {
		return err
	}
	if err := sleep(ctx, time.Duration(seconds)*time.Second-2*margin); err != nil {
		return err
	}
	last, err := readCounters(ctx, r, b)
	if err != nil {
		return err
	}
	if err := c.wait(ctx, iperfTimeout(seconds)); err != nil {
		if _, perr := parseIperf(stdout.Bytes()); perr != nil {
			return perr
		}
		return fmt.Errorf("iperf3: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if _, err := parseIperf(stdout.Bytes()); err != nil {
		return err
	}
	first.rateTo(last, len(b.switchPIDs) > 0, s)
	if last.rx == first.rx {
		return fmt.Errorf("pod B's %s received no frame in the middle of the run", podIfName)
	}
	return nil
}

// counters are the frame counters of a testbed and the switch's CPU time
// at one moment.
type counters struct {
	at  time.Time     // when pod B's counter was read (the middle of the read)
	rx  uint64        // frames received at pod B's eth0
	tx  uint64        // frames pod A's eth0 took: tx packets + tx dropped
	cpu time.Duration // the switch's CPU time; 0 for the kernel's
}

// readCounters reads pod B's receive counter, the switch's CPU time right
// after it, then pod A's transmit counters.
func readCounters(ctx context.Context, r *runner, b *testbed) (counters, error) {
	t0 := time.Now()
	sb, err := readLinkStats(ctx, r, b.podB)
	if err != nil {
		return counters{}, err
	}
	t1 := time.Now()
	cpu, _, err := b.cpuTime()
	if err != nil {
		return counters{}, err
	}
	sa, err := readLinkStats(ctx, r, b.podA)
	if err != nil {
		return counters{}, err
	}
	return counters{at: t0.Add(t1.Sub(t0) / 2), rx: sb.RX.Packets, tx: sa.TX.Packets + sa.TX.Dropped, cpu: cpu}, nil
}

// rateTo records the frame rates from c to later, and with cpu the
// switch's CPU use and CPU time per delivered frame.
func (c counters) rateTo(later counters, cpu bool, s *sample) {
	secs := later.at.Sub(c.at).Seconds()
	delivered := float64(later.rx - c.rx)
	s[framesDelivered] = delivered / secs
	s[framesSent] = float64(later.tx-c.tx) / secs
	if !cpu {
		return
	}
	used := (later.cpu - c.cpu).Seconds()
	s[cpuCoresUDP] = used / secs
	if delivered > 0 {
		s[cpuPerFrameUs] = used * 1e6 / delivered
	}
}

// linkStats are the counters `ip -s -j link show` prints for a link.
type linkStats struct {
	RX struct {
		Packets uint64 `json:"packets"`
	} `json:"rx"`
	TX struct {
		Packets uint64 `json:"packets"`
		Dropped uint64 `json:"dropped"`
	} `json:"tx"`
}

// readLinkStats returns the counters of eth0 in namespace ns.
func readLinkStats(ctx context.Context, r *runner, ns string) (linkStats, error) {
	out, err := r.output(ctx, ipTimeout, "ip", "-n", ns, "-s", "-j", "link", "show", "dev", podIfName)
	if err != nil {
		return linkStats{}, err
	}
	st, err := parseLinkStats(out)
	if err != nil {
		return linkStats{}, fmt.Errorf("%s in %s: %w", podIfName, ns, err)
	}
	return st, nil
}

// parseLinkStats parses the output of `ip -s -j link show dev IF`.
func parseLinkStats(out []byte) (linkStats, error) {
	var links []struct {
		Stats64 *linkStats `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return linkStats{}, fmt.Errorf("ip -s -j link: %w", err)
	}
	if len(links) != 1 || links[0].Stats64 == nil {
		return linkStats{}, fmt.Errorf("ip -s -j link: want one link with stats64, got %d links", len(links))
	}
	return *links[0].Stats64, nil
}

// parseIperf returns the throughput pod B received, in bit/s, from
// iperf3's JSON report, or the error iperf3 reported. For UDP it is
// iperf3's own figure, which the harness does not use.
func parseIperf(out []byte) (float64, error) {
	var rep struct {
		Error string `json:"error"`
		End   struct {
			SumReceived *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, fmt.Errorf("iperf3 report: %w", err)
	}
	switch {
	case rep.Error != "":
		return 0, fmt.Errorf("iperf3: %s", rep.Error)
	case rep.End.SumReceived != nil:
		return rep.End.SumReceived.BitsPerSecond, nil
	case rep.End.Sum != nil:
		return rep.End.Sum.BitsPerSecond, nil
	}
	return 0, errors.New("iperf3 report: no end.sum_received or end.sum")
}

// pingStats are the figures of ping's summary.
type pingStats struct {
	transmitted, received int
	avgMs                 float64
}

var (
	pingCountsRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)
	pingRTTRE    = regexp.MustCompile(`rtt min/avg/max/mdev = [\d.]+/([\d.]+)/[\d.]+/[\d.]+ ms`)
)

// parsePing parses the summary iputils ping prints.
func parsePing(out []byte) (pingStats, error) {
	var p pingStats
	m := pingCountsRE.FindSubmatch(out)
	if m == nil {
		return p, fmt.Errorf("ping: no summary in %q", bytes.TrimSpace(out))
	}
	p.transmitted, _ = strconv.Atoi(string(m[1])) // \d+
	p.received, _ = strconv.Atoi(string(m[2]))
	if p.received == 0 {
		return p, fmt.Errorf("ping: %d sent, no reply", p.transmitted)
	}
	m = pingRTTRE.FindSubmatch(out)
	if m == nil {
		return p, fmt.Errorf("ping: no rtt line in %q", bytes.TrimSpace(out))
	}
	var err error
	if p.avgMs, err = strconv.ParseFloat(string(m[1]), 64); err != nil {
		return p, fmt.Errorf("ping: average rtt: %w", err)
	}
	return p, nil
}
