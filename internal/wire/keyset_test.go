package wire

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
)

// TestSetRequests: how each request on a set is encoded, with and without
// fencing, and how a set's acquire reply reads.
func TestSetRequests(t *testing.T) {
	plain := NewKeySet([]string{"p:a", "p:b"}, nil)
	fenced := NewKeySet([]string{"p:a", "p:b"}, []string{"{p:a}:fence", "{p:b}:fence"})
	ttl, by := int64(1000), int64(1700000000000)
	for _, tc := range []struct {
		name    string
		o       Op
		cluster bool // the master is a Redis Cluster, whose Release announces marked keys with SPUBLISH
		want    []any
	}{
		{"acquire", Acquire(plain.Target("t"), ttl, nil), false,
			[]any{"evalsha", scripts.AcquireSet.SHA, int64(2), "p:a", "p:b", "t", int64(2), ttl}},
		{"fenced acquire", Acquire(fenced.Target("t"), ttl, nil), false,
			[]any{"evalsha", scripts.AcquireSet.SHA, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(2), ttl}},
		{"raise", Raise(fenced.Target("t"), 7), false,
			[]any{"evalsha", scripts.RaiseSet.SHA, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(7)}},
		{"extend", Extend(plain.Target("t"), ttl, 0, Bounds{RetakeBy: by}), false,
			[]any{"evalsha", scripts.ExtendSet.SHA, int64(2), "p:a", "p:b", "t", int64(2), ttl, by}},
		{"fenced extend", Extend(fenced.Target("t"), ttl, 7, Bounds{RetakeBy: by}), false,
			[]any{"evalsha", scripts.ExtendSet.SHA, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(2), ttl, by, int64(7)}},
		{"release", Release(fenced.Target("t"), nil, ReleaseFacts{}), false,
			[]any{"evalsha", scripts.ReleaseSet.SHA, int64(2), "p:a", "p:b", "t", ""}},
		{"release on a Cluster master", Release(fenced.Target("t"), nil, ReleaseFacts{}), true,
			[]any{"evalsha", scripts.ReleaseSet.SHA, int64(2), "p:a", "p:b", "t", "", "s"}},
		{"kept", Release(fenced.Target("t"), int64(300), ReleaseFacts{}), false,
			[]any{"evalsha", scripts.ReleaseSet.SHA, int64(2), "p:a", "p:b", "t", int64(300)}},
	} {
		r := &request{op: tc.o, cluster: tc.cluster}
		r.build(false, false)
		if got := plainArgs(r.cmd.Args()); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		r.build(true, false) // EVAL: the source in place of the digest
		var src any
		for _, sc := range scripts.All {
			if sc.SHA == tc.want[1] {
				src = sc.Src
			}
		}
		if got := plainArgs(r.cmd.Args()); got[0] != "eval" || got[1] != src || !slices.Equal(got[2:], tc.want[2:]) {
			t.Errorf("%s as EVAL: %.40v", tc.name, got)
		}
	}
	for _, tc := range []struct {
		reply   int64
		wantVal int64
		wantErr error
	}{{1, 1, nil}, {42, 42, nil}, {-1, 1, ErrTaken}, {-3, 3, ErrTaken}} {
		r := &request{op: Acquire(plain.Target("t"), ttl, nil)}
		r.cmd = redis.NewCmd(context.Background())
		r.cmd.SetVal(tc.reply)
		if v, err := r.result(nil); v != tc.wantVal || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("reply %d: %d, %v; want %d, %v", tc.reply, v, err, tc.wantVal, tc.wantErr)
		}
	}
}

// plainArgs is args with each bound of an Extend (the request's own
// *unixMs) as its int64.
func plainArgs(args []any) []any {
	out := slices.Clone(args)
	for i, a := range out {
		if m, ok := a.(*unixMs); ok {
			out[i] = m.ms
		}
	}
	return out
}
