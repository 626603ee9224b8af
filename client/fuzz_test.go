package client

import (
	"encoding/binary"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// FuzzReply feeds the client's reply reading anything a server (or an
// impostor on the subject) could send: it never panics, and a reply it
// accepts has exactly the ids asked for, as encoded.
func FuzzReply(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1}, "", 1)
	f.Add([]byte{}, "503", 1)
	f.Add([]byte("12\n13"), "", 2)
	f.Add(make([]byte, 17), "", 2)
	f.Fuzz(func(t *testing.T, data []byte, code string, n int) {
		if n < 1 || n > 10000 {
			return
		}
		msg := &nats.Msg{Data: data, Header: nats.Header{}}
		if code != "" {
			msg.Header.Set(wire.ErrorCodeHeader, code)
			msg.Header.Set(wire.ErrorHeader, "fuzz")
		}
		if err := wire.ReplyError(msg); err != nil {
			return
		}
		ids, err := decodeReply(msg, n)
		if err != nil {
			return
		}
		if len(ids) != n || len(data) != 8*n {
			t.Fatalf("accepted %d ids from %d bytes for n=%d", len(ids), len(data), n)
		}
		for i, id := range ids {
			if uint64(id) != binary.BigEndian.Uint64(data[8*i:]) {
				t.Fatalf("id %d = %d, not what was sent", i, id)
			}
		}
	})
}
