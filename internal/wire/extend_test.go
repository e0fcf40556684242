package wire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestExtendScriptsDoNothingPastTheValidity: each extend script (one key,
// fenced, a set, a fenced set), encoded as a request and run on a real
// master, renews a key still ours only before the validity's end it
// carries, whatever the re-take deadline (so a master clock a little ahead
// fails no renewal), and re-takes a vanished key only before the re-take
// deadline. Without a validity's end, the re-take deadline bounds both.
func TestExtendScriptsDoNothingPastTheValidity(t *testing.T) {
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
	now := time.Now()
	past, future := now.Add(-time.Second).UnixMilli(), now.Add(time.Minute).UnixMilli()
	cases := []struct {
		name              string
		absent            bool  // the lock key (the set's second key) has vanished
		retakeBy, validBy int64 // validBy 0: not sent
		want              int64
		wantErr           error
		renewed           bool // the key lasts the TTL after
	}{
		{"ours, before the validity's end", false, future, future, 1, nil, true},
		{"ours, past the validity's end", false, future, past, 0, ErrPastValidity, false},
		{"ours, past the re-take deadline only", false, past, future, 1, nil, true},
		{"ours, past the re-take deadline, no validity's end", false, past, 0, 0, ErrPastValidity, false},
		{"vanished, before both", true, future, future, 2, nil, true},
		{"vanished, past the re-take deadline", true, past, future, 0, ErrAbsent, false},
	}
	for _, vr := range variants {
		for _, tc := range cases {
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
			o.extend.RetakeBy, o.extend.ValidBy = tc.retakeBy, tc.validBy
			r := &request{op: o}
			r.build(true, true)
			_ = rdb.Process(ctx, r.cmd)
			v, err := r.result(nil)
			if v != tc.want || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("%s, %s: %d, %v; want %d, %v", vr.name, tc.name, v, err, tc.want, tc.wantErr)
				continue
			}
			pttl := rdb.PTTL(ctx, last).Val()
			switch {
			case tc.renewed && pttl < 50*time.Second:
				t.Errorf("%s, %s: PTTL %v after, want the TTL", vr.name, tc.name, pttl)
			case !tc.renewed && pttl > 10*time.Second:
				t.Errorf("%s, %s: PTTL %v after, want the key untouched", vr.name, tc.name, pttl)
			}
		}
	}
}
