package api_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ufp-dev/ufp/api"
	"github.com/ufp-dev/ufp/hns"
)

// A CNI plugin or a controller gives a pod an endpoint: ufpd makes a TAP,
// moves it into the pod's namespace as eth0 and sets its address, MAC and
// routes. (It needs a running ufpd, so this example is not run.)
func ExampleClient_CreateEndpoint() {
	c := api.NewClient(api.DefaultSocket)
	ctx := context.Background()
	ep := &api.Endpoint{
		EndpointConfig: hns.EndpointConfig{
			Name:               "pod-c",
			HostComputeNetwork: "flannel.4096",
			MacAddress:         "02:00:00:00:01:0c",
			IpConfigurations:   []hns.IpConfigConfig{{IpAddress: "10.244.1.12", PrefixLength: 24}},
		},
		Device: &api.Device{Type: "tap", NetNS: "/var/run/netns/pod-c"},
	}
	if err := c.CreateEndpoint(ctx, ep); api.IsConflict(err) {
		log.Printf("pod-c exists already")
	} else if err != nil {
		log.Fatal(err) // the message names the object and the field
	}
	got, err := c.Endpoint(ctx, "pod-c")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Status.Port.Device.Serving)
}
