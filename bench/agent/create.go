package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// objects are what the harness created: per Service its ClusterIP and
// the EndpointSlice as last written (its resourceVersion is the next
// update's base). Entry i is Service i.
type objects struct {
	clusterIP []string
	slices    []*discoveryv1.EndpointSlice
}

// create makes the namespace, the agent's Node, and s's Services and
// EndpointSlices with workers in parallel, and returns them and the time
// it took.
func create(ctx context.Context, cs kubernetes.Interface, s shape, workers int) (*objects, time.Duration, error) {
	t0 := time.Now()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, 0, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	n, err := cs.CoreV1().Nodes().Create(ctx, node(), metav1.CreateOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("node %s: %w", nodeName, err)
	}
	// A create drops the status; its addresses are set as a kubelet
	// would.
	n.Status = node().Status
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return nil, 0, fmt.Errorf("node %s status: %w", nodeName, err)
	}

	o := &objects{clusterIP: make([]string, s.Services), slices: make([]*discoveryv1.EndpointSlice, s.Services)}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= s.Services || ctx.Err() != nil {
					return
				}
				if err := createOne(ctx, cs, s, o, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return o, time.Since(t0), nil
}

// createOne creates Service i and its EndpointSlice.
func createOne(ctx context.Context, cs kubernetes.Interface, s shape, o *objects, i int) error {
	svc, err := cs.CoreV1().Services(namespace).Create(ctx, service(i), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service %s: %w", serviceName(i), err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("service %s: no ClusterIP", serviceName(i))
	}
	o.clusterIP[i] = svc.Spec.ClusterIP
	es, err := cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, s.slice(i), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("endpointslice of %s: %w", serviceName(i), err)
	}
	o.slices[i] = es
	return nil
}
