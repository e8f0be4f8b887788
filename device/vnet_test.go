package device

import (
	"testing"

	"github.com/ufp-dev/ufp/dataplane"
)

// TestPutVnet checks that the header written for a frame's offloads
// reads back as the same offloads.
func TestPutVnet(t *testing.T) {
	for _, o := range []dataplane.Offload{
		{},
		{DataValid: true},
		{NeedsCsum: true, CsumStart: 34, CsumOffset: 16},
		{NeedsCsum: true, CsumStart: 54, CsumOffset: 6, GSOType: dataplane.GSOUDPL4, GSOSize: 1472, HdrLen: 62},
		{NeedsCsum: true, CsumStart: 34, CsumOffset: 16, GSOType: dataplane.GSOTCPv4 | dataplane.GSOECN, GSOSize: 1448, HdrLen: 66},
	} {
		f := make([]byte, 9000)
		f[34+12] = 8 << 4 // a TCP header of 32 bytes at 34
		p := dataplane.NewPacket(dataplane.BufferSize)
		p.SetFrame(f)
		p.Offload = o
		h := make([]byte, vnetLen)
		for i := range h {
			h[i] = 0xee // every byte is written
		}
		putVnet(h, p)
		q := dataplane.NewPacket(dataplane.BufferSize)
		q.SetFrame(f)
		if !vnetOffload(h, 0, q) || q.Offload != o {
			t.Errorf("%+v: header % x reads back as %+v", o, h, q.Offload)
		}
	}
}
