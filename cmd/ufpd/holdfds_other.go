//go:build !linux

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/ufp-dev/ufp/device"
	"github.com/ufp-dev/ufp/vswitch"
)

// Off Linux no descriptor outlives ufpd: there is no holder, and a
// restart opens the devices again.

type holderClient struct{}

type sdStore struct{}

func (*sdStore) close() {}

func (*holderClient) startWatch()         {}
func (*holderClient) detach()             {}
func (*holderClient) abandon()            {}
func (*holderClient) quit()               {}
func (*holderClient) drop(string)         {}
func (*holderClient) dropSync(string)     {}
func (*holderClient) put(fdMsg, int) bool { return false }

func holderMain(stderr io.Writer) int {
	fmt.Fprintln(stderr, "ufpd fdholder: needs Linux")
	return 2
}

func inheritDevices(*config, *slog.Logger) inherited { return inherited{} }

func closeHeld(map[string]heldFd) {}

func (d *daemon) openOrAdopt(spec deviceConfig, link device.Link) (vswitch.Device, string, error) {
	dev, reattached, err := openDevice(spec, link)
	if reattached {
		return dev, "reattached", err
	}
	return dev, "made", err
}

func keepOnClose(vswitch.Device) {}

func (d *daemon) releaseHeld()                   {}
func (d *daemon) hold(string)                    {}
func (d *daemon) unhold(string)                  {}
func (d *daemon) keepHolder(ctx context.Context) {}
