// Package servers gives the examples their Redis servers: real ones by
// address, or in-process miniredis servers, so that an example runs with
// nothing installed.
package servers

import (
	"context"
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A Set is the clients an example opened and the in-process servers it
// started. Close closes them all.
type Set struct {
	clients []*redis.Client
	servers []*miniredis.Miniredis
}

// Masters returns a client per address or, with no addresses, per one of n
// in-process servers it starts, and says which for the example's output.
func (s *Set) Masters(ctx context.Context, addrs []string, n int) ([]redis.UniversalClient, string, error) {
	where := fmt.Sprintf("%d Redis masters %s", len(addrs), strings.Join(addrs, ","))
	switch len(addrs) {
	case 0:
		where = fmt.Sprintf("%d in-process Redis masters (miniredis)", n)
		addrs = make([]string, n)
	case 1:
		where = "1 Redis master " + addrs[0] + " (single-instance lock)"
	}
	masters := make([]redis.UniversalClient, 0, len(addrs))
	for _, a := range addrs {
		c, err := s.Add(ctx, a)
		if err != nil {
			return nil, "", err
		}
		masters = append(masters, c)
	}
	return masters, where, nil
}

// Add returns a client of the server at addr, or, when addr is "", of an
// in-process server it starts. An in-process server expires keys as real
// time passes, like Redis (miniredis otherwise expires them only on
// FastForward). The server is pinged, so that a wrong address fails here,
// plainly, rather than as every lock "not obtained" later.
func (s *Set) Add(ctx context.Context, addr string) (*redis.Client, error) {
	if addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		m.ClockTTL(true)
		s.servers = append(s.servers, m)
		addr = m.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(addr), MaxRetries: -1, ContextTimeoutEnabled: true})
	s.clients = append(s.clients, c)
	if err := c.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return c, nil
}

// Close closes every client and stops every in-process server.
func (s *Set) Close() {
	for _, c := range s.clients {
		c.Close()
	}
	for _, m := range s.servers {
		m.Close()
	}
}
