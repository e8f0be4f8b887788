package inspect

// CaptureOptions configures Capture. The zero value captures every frame
// in both directions, whole, until the context ends.
type CaptureOptions struct {
	// Count is how many frames to write before returning (0: until the
	// context ends).
	Count int `json:"count"`
	// Snaplen is how many bytes of each frame are written (0: 65535).
	Snaplen int `json:"snaplen"`
	// Direction selects the frames: "in" those the port's device
	// delivers to the switch, "out" those the switch writes to it, ""
	// both.
	Direction string `json:"direction"`
}

// CaptureSummary says what a capture did.
type CaptureSummary struct {
	// Captured counts the frames written.
	Captured uint64 `json:"captured"`
	// Dropped counts the frames the capture missed because it was not
	// keeping up (its queue was full): the switch never waits for a
	// capture.
	Dropped uint64 `json:"dropped"`
}

// Capture directions (CaptureOptions.Direction).
const (
	CaptureIn   = "in"
	CaptureOut  = "out"
	CaptureBoth = ""
)
