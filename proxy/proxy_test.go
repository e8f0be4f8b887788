package proxy

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ufp-dev/ufp/api"
)

// translationCase is one Service and what it must become on n1.
type translationCase struct {
	name   string
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	node   *Node    // nil: testNode
	opts   *Options // nil: testOpts
	want   Result
}

func (tc *translationCase) run(t *testing.T) Result {
	t.Helper()
	n, o := &testNode, &testOpts
	if tc.node != nil {
		n = tc.node
	}
	if tc.opts != nil {
		o = tc.opts
	}
	return Service(tc.svc, tc.slices, n, o, testLocals)
}

func TestServiceCluster(t *testing.T) {
	const ilb = 1
	tests := []translationCase{
		{
			name:   "cluster IP, local and remote backends",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{v4(ep{ip: "10.0.2.7", node: "n2"}, ep{ip: "10.0.1.5", node: "n1"})},
			want: Result{
				LoadBalancers: []api.LoadBalancer{
					lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), []string{"10.96.0.10"}, "pod-a", "remote.10.0.2.7"),
				},
				Remotes:   []api.Endpoint{remote("10.0.2.7")},
				Endpoints: 2,
			},
		},
		{
			name: "no endpoints: the load balancer rejects",
			svc:  service(),
			want: Result{
				LoadBalancers: []api.LoadBalancer{
					lbOf("default.web.tcp80.v4.cluster", tcp(80, 8080, ilb), []string{"10.96.0.10"}),
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(t)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
