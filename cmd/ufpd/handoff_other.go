//go:build !linux

package main

import (
	"errors"
	"net"
	"os"

	"github.com/ufp-dev/ufp/api"
)

// Off Linux there is no graceful restart: no device can be handed over.

var restartSignals []os.Signal

type handedIn struct {
	devs      map[string]heldFd
	listeners map[string]net.Listener
}

func predecessor() (*fdConn, error)             { return nil, nil }
func receiveHandoff(*fdConn) (*handedIn, error) { return nil, errors.ErrUnsupported }
func failTo(*fdConn, error)                     {}
func (d *daemon) takeOver(*fdConn) error        { return errors.ErrUnsupported }
func (d *daemon) restart(string) (*api.Restarted, error) {
	return nil, errors.New("graceful restart needs Linux")
}

// fdConn carries nothing off Linux.
type fdConn struct{ c net.Conn }

func (fc *fdConn) send(fdMsg, int) error { return errors.ErrUnsupported }
