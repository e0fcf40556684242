package redlock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// skewedClock builds the chaos suite's clock shim (chaos/shim/clockshim.c)
// and returns the environment that runs a redis-server with its wall clock
// offset by offset, and a function that moves it to another offset at
// once (a jump). It skips without a C compiler.
func skewedClock(t *testing.T, offset time.Duration) ([]string, func(time.Duration)) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc for the clock shim: %v", err)
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "clockshim.so")
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, filepath.Join("chaos", "shim", "clockshim.c")).CombinedOutput(); err != nil {
		t.Fatalf("building the clock shim: %v: %s", err, out)
	}
	// The control file: seq (even: stable), offset ns, rate ppm, anchor ns.
	ctl := make([]byte, 4096)
	binary.LittleEndian.PutUint64(ctl[0:], 2)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(int64(offset)))
	binary.LittleEndian.PutUint64(ctl[16:], 1_000_000)
	path := filepath.Join(dir, "clock")
	if err := os.WriteFile(path, ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	seq := uint64(2)
	jump := func(to time.Duration) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // never truncated: the server maps it
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		put := func(at int64, v uint64) {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], v)
			if _, err := f.WriteAt(b[:], at); err != nil {
				t.Fatal(err)
			}
		}
		put(0, seq+1) // odd: the reader waits
		put(8, uint64(int64(to)))
		seq += 2
		put(0, seq)
	}
	return []string{"LD_PRELOAD=" + so, "CLOCKSHIM_FILE=" + path}, jump
}

// TestClockOffsetIsMeasuredOnEveryFreshConnection: a lane's fresh
// connection reads the master's clock in the round trip that sets it up
// (INFO server), and the node keeps the offset, low by no more than the
// round trip and never high; the next fresh connection measures it anew
// (after a jump of the master's clock here). A client that may not run
// INFO keeps 0, as before any connection.
func TestClockOffsetIsMeasuredOnEveryFreshConnection(t *testing.T) {
	defer func(d time.Duration) { connIdle = d }(connIdle)
	connIdle = 300 * time.Millisecond // the lane gives its connection back soon
	ctx := context.Background()
	env, jump := skewedClock(t, 3*time.Second)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	defer rdb.Close()
	c, err := New([]redis.UniversalClient{rdb}, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ms := c.nodes[0].clock.Load(); ms != 0 {
		t.Fatalf("offset %dms before any connection, want 0", ms)
	}
	cycle := func() {
		t.Helper()
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// within says whether the offset measured is want, or below it by
	// less than margin (generous: the round trip on a loaded machine).
	const margin = 250
	within := func(ms, want int64) bool { return ms <= want && ms > want-margin }
	cycle()
	if ms := c.nodes[0].clock.Load(); !within(ms, 3000) {
		t.Fatalf("offset %dms for a master 3s ahead, want 3000ms or up to %dms below", ms, margin)
	}
	jump(-2 * time.Second)
	laneIdle(t, rdb)
	cycle()
	if ms := c.nodes[0].clock.Load(); !within(ms, -2000) {
		t.Fatalf("offset %dms after the master's clock jumped to 2s behind and the lane took a fresh connection, want -2000ms or up to %dms below", ms, margin)
	}

	admin := redistest.Clients(t, servers)[0]
	if err := admin.Do(ctx, "acl", "setuser", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	denied := servers[0].Client(func(o *redis.Options) {
		o.Username, o.Password = "noinfo", "pw"
		o.ContextTimeoutEnabled = true
	})
	defer denied.Close()
	d, err := New([]redis.UniversalClient{denied}, WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := d.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ms := d.nodes[0].clock.Load(); ms != 0 {
		t.Fatalf("offset %dms where INFO is denied, want 0", ms)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestExtendBoundsGoOutInTheMastersClock: build adds the master's clock
// offset (skew) to an Extend's bounds, for each extend script (one key,
// fenced, a set, a fenced set). The master here is in step with the
// client: bounds a minute ahead of the client's clock, sent with an
// offset that says its clock is two minutes behind, reach it a minute in
// its past, and it does nothing; with one that says ahead, it renews.
// Without an offset the op's own values go out.
func TestExtendBoundsGoOutInTheMastersClock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0]
	const ttl = 60000 // ms
	keys := []any{"{s}:a", "{s}:b"}
	variants := []struct {
		name string
		o    op
	}{
		{"key", newOp(opExtend, "{s}:a", "", "tok").with(opExtend, int64(ttl), 0)},
		{"fenced key", newOp(opExtend, "{s}:a", "{s}:a:fence", "tok").with(opExtend, int64(ttl), 5)},
		{"set", (&keySet{names: []string{"a", "b"}, keys: keys, n: int64(2), n2: int64(4)}).acquire("tok", nil).with(opExtend, int64(ttl), 5)},
		{"fenced set", (&keySet{names: []string{"a", "b"}, keys: keys, ckeys: []any{"{s}:a:fence", "{s}:b:fence"}, n: int64(2), n2: int64(4)}).acquire("tok", nil).with(opExtend, int64(ttl), 5)},
	}
	ahead := time.Now().Add(time.Minute).UnixMilli()
	for _, vr := range variants {
		for _, tc := range []struct {
			name    string
			absent  bool  // the lock key (the set's second key) has vanished
			skew    int64 // ms
			want    int64
			wantErr error
		}{
			{"ours, no offset", false, 0, 1, nil},
			{"ours, offset 2m behind", false, -120000, 0, errPastValidity},
			{"ours, offset 2m ahead", false, 120000, 1, nil},
			{"vanished, no offset", true, 0, 2, nil},
			{"vanished, offset 2m behind", true, -120000, 0, errAbsent},
		} {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			last := "{s}:a"
			if vr.o.set != nil {
				last = "{s}:b"
				if err := rdb.Set(ctx, "{s}:a", "tok", 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.absent {
				if err := rdb.Set(ctx, last, "tok", 10*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			o := vr.o
			o.retakeBy, o.validBy = ahead, ahead
			r := &request{op: o, skew: tc.skew}
			r.build(false, false)
			args := r.cmd.Args()
			if got, want := fmt.Sprint(args[len(args)-1]), fmt.Sprint(ahead+tc.skew); got != want {
				t.Errorf("%s, %s: the validity's end goes out as %s, want %s", vr.name, tc.name, got, want)
			}
			r.build(true, false) // EVAL: no script to load
			_ = rdb.Process(ctx, r.cmd)
			if v, err := r.result(nil); v != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("%s, %s: %d, %v; want %d, %v", vr.name, tc.name, v, err, tc.want, tc.wantErr)
			}
			if tc.skew == 0 && (args[len(args)-1] != o.validBy || r.op.retakeBy != o.retakeBy) {
				t.Errorf("%s, %s: the bounds went out as %T, want the op's own boxes", vr.name, tc.name, args[len(args)-1])
			}
		}
	}
}
