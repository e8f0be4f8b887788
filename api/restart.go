package api

import "context"

// RestartRequest asks ufpd for a graceful restart (POST /v1/restart):
// it starts its successor, hands it the devices, the listeners and the
// connections, and exits once the successor serves.
type RestartRequest struct {
	// Binary is the successor's executable: an upgrade. Empty: ufpd's
	// own executable, started again.
	Binary string `json:"binary,omitempty"`
}

// Restarted is the answer of a graceful restart that succeeded.
type Restarted struct {
	// Pid is the successor's process ID; Binary its executable.
	Pid    int    `json:"pid"`
	Binary string `json:"binary"`
	// Paused is how long no ufpd read the devices (frames waited in the
	// kernel's queues), in microseconds.
	PausedMicros int64 `json:"paused_us"`
}

// Restart asks ufpd for a graceful restart onto binary ("": its own).
// ufpd answers once its successor serves, or with the reason it did not
// (ufpd then keeps serving).
func (c *Client) Restart(ctx context.Context, binary string) (*Restarted, error) {
	var out Restarted
	if err := c.Do(ctx, "POST", "/v1/restart", &RestartRequest{Binary: binary}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
