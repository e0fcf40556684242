package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The master's clock offset (state.sawClock), and an Extend's bounds in
// the master's clock (request.bounds).

// TestClockOffsetIsMeasuredOnEveryFreshConnection: a lane's fresh
// connection reads the master's clock in the round trip that sets it up
// (INFO server), and the master keeps the offset, low by no more than the
// round trip and never high; the next fresh connection measures it anew
// (after a jump of the master's clock here). A client that may not run
// INFO keeps 0, as before any connection.
func TestClockOffsetIsMeasuredOnEveryFreshConnection(t *testing.T) {
	const idle = 300 * time.Millisecond // the lane gives its connection back soon
	ctx := context.Background()
	env, jump := skewedClock(t, 3*time.Second)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	rdb := servers[0].Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	const timeout = 500 * time.Millisecond
	m := newMaster(t, rdb, Config{NodeTimeout: timeout, ConnIdle: idle})
	if ms := m.st.clock.Load(); ms != 0 {
		t.Fatalf("offset %dms before any connection, want 0", ms)
	}
	lockCycle := func() {
		t.Helper()
		if err := cycle(m, "k", timeout); err != nil {
			t.Fatal(err)
		}
	}
	// within says whether the offset measured is want, or below it by
	// less than margin (generous: the round trip on a loaded machine).
	const margin = 250
	within := func(ms, want int64) bool { return ms <= want && ms > want-margin }
	lockCycle()
	if ms := m.st.clock.Load(); !within(ms, 3000) {
		t.Fatalf("offset %dms for a master 3s ahead, want 3000ms or up to %dms below", ms, margin)
	}
	jump(-2 * time.Second)
	laneIdle(t, rdb)
	lockCycle()
	if ms := m.st.clock.Load(); !within(ms, -2000) {
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
	t.Cleanup(func() { denied.Close() })
	d := newMaster(t, denied, Config{NodeTimeout: timeout})
	if err := lock(d, "k", "tok", timeout); err != nil {
		t.Fatal(err)
	}
	if ms := d.st.clock.Load(); ms != 0 {
		t.Fatalf("offset %dms where INFO is denied, want 0", ms)
	}
	if err := unlock(d, "k", "tok", timeout); err != nil {
		t.Fatal(err)
	}
}

// TestExtendBoundsGoOutInTheMastersClock: build adds the master's clock
// offset (skew) to an Extend's bounds, for each extend script (one key,
// fenced, a set, a fenced set). The master here is in step with the
// client: bounds a minute ahead of the client's clock, sent with an
// offset that says its clock is two minutes behind, reach it a minute in
// its past, and it does nothing; with one that says ahead, it renews.
// Without an offset the Op's own values go out.
func TestExtendBoundsGoOutInTheMastersClock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0]
	const ttl = 60000 // ms
	keys := []string{"{s}:a", "{s}:b"}
	plain, fenced := NewKeySet(keys, nil), NewKeySet(keys, []string{"{s}:a:fence", "{s}:b:fence"})
	variants := []struct {
		name string
		o    Op
	}{
		{"key", Extend(NewTarget("{s}:a", "", "tok"), int64(ttl), 0, Bounds{})},
		{"fenced key", Extend(NewTarget("{s}:a", "{s}:a:fence", "tok"), int64(ttl), 5, Bounds{})},
		{"set", Extend(plain.Target("tok"), int64(ttl), 5, Bounds{})},
		{"fenced set", Extend(fenced.Target("tok"), int64(ttl), 5, Bounds{})},
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
			{"ours, offset 2m behind", false, -120000, 0, ErrPastValidity},
			{"ours, offset 2m ahead", false, 120000, 1, nil},
			{"vanished, no offset", true, 0, 2, nil},
			{"vanished, offset 2m behind", true, -120000, 0, ErrAbsent},
		} {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			last := "{s}:a"
			if vr.o.target.set != nil {
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
			o.extend.RetakeBy, o.extend.ValidBy = ahead, ahead
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
			if args[len(args)-1] != any(&r.bound[1]) {
				t.Errorf("%s, %s: the validity's end went out as %T, want the request's own", vr.name, tc.name, args[len(args)-1])
			}
		}
	}
}
