package api

import (
	"encoding/json"
	"fmt"

	"github.com/ufp-dev/ufp/hns"
	"github.com/ufp-dev/ufp/inspect"
)

// DefaultSocket is where ufpd listens and its clients connect by default.
const DefaultSocket = "/run/ufp/ufpd.sock"

// Version is the API's path prefix.
const Version = "v1"

// Device is the device that backs a port: a TAP or TUN interface ufpd
// makes (and moves into a namespace), or an existing interface the uplink
// uses through AF_PACKET.
type Device struct {
	// Port is the name of the port (an endpoint's Name, the uplink's,
	// Uplink.HostPort). An endpoint's device may leave it empty: it is
	// the endpoint's.
	Port string `json:"port,omitempty"`
	// Type is tap, tun, afpacket or afxdp.
	Type string `json:"type"`
	// Name is the interface's name: for tap and tun the name it gets in
	// its namespace (default eth0 in another namespace, the port's name
	// otherwise); for afpacket the existing interface.
	Name string `json:"name,omitempty"`
	// NetNS is the network namespace: a path (/var/run/netns/pod-a,
	// /proc/PID/ns/net) or a name under /var/run/netns. Empty: ufpd's.
	NetNS string `json:"netns,omitempty"`
}

// Endpoint is an HNS endpoint with the device that backs its port. Device
// is optional: an endpoint without one is in the policy (a load balancer
// backend, say) and receives nothing until it has one.
type Endpoint struct {
	hns.EndpointConfig
	Device *Device `json:"Device,omitempty"`
	// Status is filled in by ufpd on reads and ignored on writes.
	Status *EndpointStatus `json:"Status,omitempty"`
}

// Network is an HNS network.
type Network = hns.NetworkConfig

// LoadBalancer is an HNS load balancer: a Service's frontends and
// backends.
type LoadBalancer = hns.LoadBalancerConfig

// Policy is an HNS policy of an endpoint: a Type and its Settings.
type Policy = hns.PolicyConfig

// Config is ufpd's whole running configuration: the policy document and
// the devices of its ports. It is what ufpd persists after every change.
type Config struct {
	Policy  json.RawMessage `json:"policy"`
	Devices []Device        `json:"devices,omitempty"`
}

// Status describes the running daemon.
type Status struct {
	PID        int    `json:"pid"`
	Generation uint64 `json:"generation"`
	// Revision counts the accepted configuration changes; a write may
	// name the revision it was based on (If-Match) and is refused if
	// another change came first.
	Revision uint64 `json:"revision"`
	// Replaced counts the times the whole configuration was replaced
	// (PUT /v1/config, a reload on SIGHUP) since this ufpd started: a
	// program that keeps its own objects in it (the node agent) then
	// lists them again.
	Replaced uint64 `json:"replaced,omitempty"`
	// State is the file the configuration is persisted to (empty: none).
	State string `json:"state,omitempty"`
	// Restored reports, after a start from the state file, what came
	// back and what could not.
	Restored *RestoreReport `json:"restored,omitempty"`
	Ports    int            `json:"ports"`
	Devices  int            `json:"devices"`
	Metrics  string         `json:"metrics,omitempty"`
}

// RestoreReport is what a start from the state file brought back.
type RestoreReport struct {
	From          string   `json:"from"`
	Revision      uint64   `json:"revision"`
	Networks      int      `json:"networks"`
	Endpoints     int      `json:"endpoints"`
	LoadBalancers int      `json:"loadBalancers"`
	Reattached    []string `json:"reattached,omitempty"` // ports whose existing interface was taken back
	Recreated     []string `json:"recreated,omitempty"`  // ports whose interface was made again
	Failed        []Failed `json:"failed,omitempty"`     // ports left without a device
	// Connections is what came back of the connections the previous
	// ufpd served (nil if it left none).
	Connections *ConnsRestored `json:"connections,omitempty"`
	// Journal is what the state file's journal added to it (nil: it
	// had none).
	Journal *JournalRestored `json:"journal,omitempty"`
}

// JournalRestored counts the changes a start read from the state file's
// journal (records, up to the revision restored) and the bytes of it
// left unread (dropped: a record cut short where ufpd died while writing
// it, a damaged one, or a journal that does not follow the state file),
// with why.
type JournalRestored struct {
	Records int    `json:"records"`
	Dropped int64  `json:"dropped,omitempty"`
	Why     string `json:"why,omitempty"`
}

// ConnsRestored counts the connections a restart carried on: restored;
// gone (their port or NAT pool is gone, or the policy decides them
// otherwise now); and records skipped as corrupt, or cut short where the
// previous ufpd died while writing.
type ConnsRestored struct {
	Restored  int  `json:"restored"`
	Gone      int  `json:"gone,omitempty"`
	Corrupt   int  `json:"corrupt,omitempty"`
	Truncated bool `json:"truncated,omitempty"`
}

// Failed names a port whose device could not be restored, and why.
type Failed struct {
	Port  string `json:"port"`
	Error string `json:"error"`
}

// Error is the body of every error response.
type Error struct {
	// Message says what is wrong, naming the object and the field.
	Message string `json:"error"`
	// Object is the object the request was about ("endpoint pod-a").
	Object string `json:"object,omitempty"`
	// Status is the HTTP status (not sent: the response line has it).
	Status int `json:"-"`
}

func (e *Error) Error() string { return e.Message }

// FlushResult is the answer to a flow flush.
type FlushResult struct {
	Removed int `json:"removed"`
}

// path joins the API version and an object path.
func path(format string, args ...any) string {
	return "/" + Version + fmt.Sprintf(format, args...)
}

// EndpointStatus is what ufpd knows of an endpoint's port and device.
type EndpointStatus struct {
	// Port is the endpoint's switch port (absent for a remote endpoint).
	Port *inspect.PortInfo `json:"port,omitempty"`
	// DeviceError says why the endpoint's device is not serving (it
	// failed, or it could not be restored after a restart).
	DeviceError string `json:"deviceError,omitempty"`
}

// FlowList is the answer to a flow listing: the flows (at most the limit
// asked for) and how many matched.
type FlowList struct {
	Flows   []inspect.FlowInfo `json:"flows"`
	Matched int                `json:"matched"`
}

// CaptureOptions are a capture's parameters.
type CaptureOptions = inspect.CaptureOptions
