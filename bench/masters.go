package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A server is one redis-server process that the harness started.
type server interface {
	Addr() string
	Close() error
}

// masterSet holds the servers of a run and one admin client per server, used
// only between measurements (INFO, FLUSHALL, SCRIPT LOAD), never by a contender.
type masterSet struct {
	servers []server
	admin   []*redis.Client
}

// startMasters starts n servers and an admin client for each.
func startMasters(n int) (*masterSet, error) {
	ss, err := startServers(n)
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	m := &masterSet{servers: ss}
	for _, s := range ss {
		m.admin = append(m.admin, redis.NewClient(&redis.Options{Addr: s.Addr()}))
	}
	return m, nil
}

func (m *masterSet) addrs(n int) []string {
	a := make([]string, n)
	for i := range n {
		a[i] = m.servers[i].Addr()
	}
	return a
}

// flush empties the first n masters, so every contender starts from the same state.
func (m *masterSet) flush(ctx context.Context, n int) error {
	for _, c := range m.admin[:n] {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// serverCPU returns used_cpu_sys + used_cpu_user, in seconds, summed over the first n masters.
func (m *masterSet) serverCPU(ctx context.Context, n int) (float64, error) {
	var sum float64
	for _, c := range m.admin[:n] {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		s, err := parseInfoCPU(info)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// parseInfoCPU sums used_cpu_sys and used_cpu_user of an INFO cpu reply.
func parseInfoCPU(info string) (float64, error) {
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", name, err)
		}
		sum += f
		found++
	}
	if found != 2 {
		return 0, errors.New("INFO cpu: used_cpu_sys or used_cpu_user missing")
	}
	return sum, nil
}

// Close stops every server and closes the admin clients.
func (m *masterSet) Close() error {
	var errs []error
	for _, c := range m.admin {
		errs = append(errs, c.Close())
	}
	for _, s := range m.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
