package vswitch

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// benchDevice is a Device for the serve benchmarks that allocates nothing:
// each credit it is given is a batch of its frames (taken in turn) for the
// port's worker to read, and it counts the frames written to it. A device
// without frames (a port that only receives) blocks its reader until it is
// closed.
type benchDevice struct {
	frames  [][]byte
	batch   int
	credits chan struct{}
	closed  chan struct{}
	once    sync.Once
	// handed counts the batches read, served counts those the worker came
	// back from (the next read began: the batch was processed and
	// written); written counts the frames written to the device.
	handed, served, written atomic.Uint64
	next                    int // the frame the next packet gets
}

func newBenchDevice(batch int, frames ...[]byte) *benchDevice {
	return &benchDevice{frames: frames, batch: batch, credits: make(chan struct{}, 4), closed: make(chan struct{})}
}

func (d *benchDevice) ReadPackets(pkts []*dataplane.Packet) (int, error) {
	if d.handed.Load() > d.served.Load() {
		d.served.Add(1)
	}
	select {
	case <-d.credits:
	case <-d.closed:
		return 0, ErrClosed
	}
	n := min(d.batch, len(pkts))
	for _, p := range pkts[:n] {
		p.SetFrame(d.frames[d.next])
		d.next = (d.next + 1) % len(d.frames)
	}
	d.handed.Add(1)
	return n, nil
}

func (d *benchDevice) WritePackets(pkts []*dataplane.Packet) (int, error) {
	select {
	case <-d.closed:
		return 0, ErrClosed
	default:
	}
	d.written.Add(uint64(len(pkts)))
	return len(pkts), nil
}

func (d *benchDevice) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

// BenchmarkServe measures 64-byte packets of the mixed policy's
// established connections (mixed_bench_test.go) through a serving switch:
// read by a port's worker in batches of 32, through the pipeline, grouped
// by output port and written to the devices, which copy nothing. "pod-a"
// is pod-a's three connections in turn (to the uplink and to pod-b: two
// writes a batch), "uplink" the two replies from the uplink (one write a
// batch). ns/op is per packet; the loop hands the worker a batch every 32
// packets and does not wait for it, so that it measures the worker's
// throughput, not a handoff; what the devices got is checked at the end.
func BenchmarkServe(b *testing.B) {
	sw, _, flows := mixSetup(b)
	var podA, up [][]byte
	for _, f := range flows {
		if f.in == sw.Port("pod-a").ID {
			podA = append(podA, f.tmpl)
		} else if f.in == sw.Port("uplink").ID {
			up = append(up, f.tmpl)
		}
	}
	devs := map[string]*benchDevice{
		"pod-a":  newBenchDevice(fpBatch, podA...),
		"pod-b":  newBenchDevice(fpBatch),
		"uplink": newBenchDevice(fpBatch, up...),
	}
	for name, d := range devs {
		if err := sw.Attach(name, d); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	for _, from := range []string{"pod-a", "uplink"} {
		b.Run(from, func(b *testing.B) {
			src := devs[from]
			var written0 uint64
			for _, d := range devs {
				written0 += d.written.Load()
			}
			drops0 := sw.Pipeline().Drops.All()
			b.ReportAllocs()
			b.SetBytes(64)
			cpu0, ok := processCPU()
			served0 := src.served.Load()
			i, batches := 0, uint64(0)
			for b.Loop() {
				if i++; i == fpBatch {
					i = 0
					src.credits <- struct{}{}
					batches++
				}
			}
			for src.served.Load() < served0+batches {
				runtime.Gosched()
			}
			if cpu1, _ := processCPU(); ok {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
			var written uint64
			for _, d := range devs {
				written += d.written.Load()
			}
			if got, want := written-written0, batches*fpBatch; got != want {
				b.Fatalf("%d frames written, want %d", got, want)
			}
			if d := sw.Pipeline().Drops.All(); d != drops0 {
				b.Fatalf("drops went from %v to %v", drops0, d)
			}
		})
	}
}
