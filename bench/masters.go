package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server is one redis-server process that the harness started.
type server interface {
	Addr() string
	Close() error
}

// masterSet holds the masters of a run: servers the harness started (owned),
// or the user's own (-masters). Its admin clients, one per master, are used
// only between measurements (INFO, cleanup), never by a contender.
type masterSet struct {
	owned   bool
	opts    []*redis.Options // how to reach each master: address, credentials, TLS
	admin   []*redis.Client
	servers []server // owned only
	info    masterInfo
	extras  extras // latency proxies and clusters, made when a cell needs them
}

// masterInfo is what the report says about the masters.
type masterInfo struct {
	Masters []masterMeta `json:"masters"`
	// INFO is false when a master refused INFO (an ACL, a managed service):
	// the run then reports no Redis CPU.
	INFO bool `json:"info_allowed"`
}

type masterMeta struct {
	Addr    string  `json:"addr"` // never a password
	Version string  `json:"redis_version,omitempty"`
	RTTus   float64 `json:"ping_rtt_us"` // median of PINGs before the run
}

// startMasters starts n servers and an admin client for each.
func startMasters(n int) (*masterSet, error) {
	ss, err := startServers(n)
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	m := &masterSet{owned: true, servers: ss}
	for _, s := range ss {
		m.opts = append(m.opts, &redis.Options{Addr: s.Addr()})
	}
	m.connectAdmin()
	return m, nil
}

// externalMasters connects to the user's masters; it starts nothing.
func externalMasters(specs []string) (*masterSet, error) {
	m := &masterSet{}
	seen := map[string]bool{}
	for _, spec := range specs {
		o, err := parseMaster(spec)
		if err != nil {
			return nil, err
		}
		if seen[o.Addr] {
			return nil, fmt.Errorf("-masters: %s is listed twice (every master must be a distinct server)", o.Addr)
		}
		seen[o.Addr] = true
		m.opts = append(m.opts, o)
	}
	m.connectAdmin()
	return m, nil
}

func (m *masterSet) connectAdmin() {
	for _, o := range m.opts {
		a := *o
		a.PoolSize, a.MaxRetries = 2, -1
		m.admin = append(m.admin, newClient(a))
	}
}

// parseMaster reads host:port, or a redis:// or rediss:// URL (a password in
// it never reaches a message).
func parseMaster(spec string) (*redis.Options, error) {
	spec = strings.TrimSpace(spec)
	if strings.Contains(spec, "://") {
		o, err := redis.ParseURL(spec)
		if err != nil {
			msg := err.Error()
			if u, uerr := url.Parse(spec); uerr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && pw != "" {
					msg = strings.ReplaceAll(msg, pw, "xxx")
				}
			}
			return nil, fmt.Errorf("-masters %s: %s", redactURL(spec), strings.ReplaceAll(msg, spec, redactURL(spec)))
		}
		return o, nil
	}
	host, port, err := net.SplitHostPort(spec)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("-masters %q: want host:port or a redis:// or rediss:// URL", spec)
	}
	return &redis.Options{Addr: spec}, nil
}

// redactURL hides the password of a URL: its user part's and a password
// query parameter's. A string that does not parse as a URL and holds an '@'
// is hidden whole: an unencoded '/', '?' or '#' in a password makes its
// host impossible to tell apart from the password.
func redactURL(s string) string {
	if !strings.Contains(s, "://") {
		if strings.Contains(s, "@") {
			return "(not shown: it may hold a password)"
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") || strings.Contains(strings.ToLower(s), "password") {
			return "(not shown: it may hold a password)"
		}
		return s
	}
	if q, err := url.ParseQuery(u.RawQuery); err != nil {
		u.RawQuery = "(not shown)" // go-redis may read a password from a query that does not parse
	} else if q.Has("password") {
		q.Set("password", "xxx")
		u.RawQuery = q.Encode()
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// describe PINGs every master, reads its version and whether INFO is
// allowed, and fills m.info.
func (m *masterSet) describe(ctx context.Context) error {
	m.info = masterInfo{INFO: true}
	for i, c := range m.admin {
		mm := masterMeta{Addr: m.opts[i].Addr}
		rtt, err := pingRTT(ctx, c, 20)
		if err != nil {
			return fmt.Errorf("PING %s: %w", mm.Addr, err)
		}
		mm.RTTus = float64(rtt) / 1e3
		if v, err := c.Info(ctx, "server").Result(); err == nil {
			mm.Version = infoValue(v, "redis_version")
		}
		if _, err := c.Info(ctx, "cpu").Result(); err != nil {
			m.info.INFO = false
		}
		m.info.Masters = append(m.info.Masters, mm)
	}
	return nil
}

// pingRTT returns the median time of n PINGs, after one that may dial.
func pingRTT(ctx context.Context, c redis.UniversalClient, n int) (time.Duration, error) {
	if err := c.Ping(ctx).Err(); err != nil {
		return 0, err
	}
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	return ds[n/2], nil
}

// matchPrefix is a SCAN MATCH pattern for every key that starts with prefix.
func matchPrefix(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + "*"
}

// findKeys returns up to limit keys under prefix on c (SCAN, never KEYS).
func findKeys(ctx context.Context, c *redis.Client, prefix string, limit int) ([]string, error) {
	var found []string
	iter := c.Scan(ctx, 0, matchPrefix(prefix), 1000).Iterator()
	for iter.Next(ctx) {
		found = append(found, iter.Val())
		if len(found) >= limit {
			break
		}
	}
	return found, iter.Err()
}

// sweep deletes every key under prefix on every given server and returns
// how many it deleted. It touches no other key.
func sweep(ctx context.Context, admin []*redis.Client, prefix string) (int, error) {
	total := 0
	for _, c := range admin {
		iter := c.Scan(ctx, 0, matchPrefix(prefix), 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			n, err := c.Unlink(ctx, batch...).Result()
			total += int(n)
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			if !strings.HasPrefix(iter.Val(), prefix) {
				continue // never: MATCH is exact, but a key outside the prefix must not go
			}
			if batch = append(batch, iter.Val()); len(batch) >= 500 {
				if err := flush(); err != nil {
					return total, err
				}
			}
		}
		if err := errors.Join(iter.Err(), flush()); err != nil {
			return total, fmt.Errorf("cleanup of %s* on %s: %w", prefix, c.Options().Addr, err)
		}
	}
	return total, nil
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

// infoValue returns the value of name in an INFO reply.
func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Close stops the extras and every owned server, and closes the admin clients.
func (m *masterSet) Close() error {
	errs := []error{m.extras.Close()}
	for _, c := range m.admin {
		errs = append(errs, c.Close())
	}
	for _, s := range m.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
