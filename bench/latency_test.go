package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The delay proxy adds its delay each way, keeps every byte in order, and
// closes cleanly.
func TestDelayProxy(t *testing.T) {
	servers := redistest.Start(t, 1)
	const d = 300 * time.Microsecond
	line := newDelayLine(d)
	p, err := newDelayProxy(servers[0].Addr(), line)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(redis.Options{Addr: p.Addr()})
	ctx := context.Background()
	rtt, err := pingRTT(ctx, c, 20)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 2*d {
		t.Errorf("PING round trip %v through a proxy of %v each way", rtt, d)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: many chunks
	if err := c.Set(ctx, "k", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "k").Bytes()
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("GET through the proxy: %d bytes, %v; want the %d bytes set", len(got), err, len(big))
	}
	if line.writes.Load() == 0 {
		t.Error("the line counted no write")
	}
	c.Close()
	if err := p.Close(); err != nil {
		t.Error(err)
	}
	line.Close()
}
