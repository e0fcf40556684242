package redlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The digests in scripts.go are written out by hand; Redis names scripts by
// the SHA1 of their source.
func TestScriptDigests(t *testing.T) {
	for i, s := range scripts {
		sum := sha1.Sum([]byte(s.src))
		if got := hex.EncodeToString(sum[:]); got != s.sha {
			t.Errorf("script %d: sha %s, want %s", i, s.sha, got)
		}
	}
}

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
	now := time.Now()
	past, future := now.Add(-time.Second).UnixMilli(), now.Add(time.Minute).UnixMilli()
	cases := []struct {
		name              string
		absent            bool // the lock key (the set's second key) has vanished
		retakeBy, validBy any  // validBy nil: not sent
		want              int64
		wantErr           error
		renewed           bool // the key lasts the TTL after
	}{
		{"ours, before the validity's end", false, future, future, 1, nil, true},
		{"ours, past the validity's end", false, future, past, 0, errPastValidity, false},
		{"ours, past the re-take deadline only", false, past, future, 1, nil, true},
		{"ours, past the re-take deadline, no validity's end", false, past, nil, 0, errPastValidity, false},
		{"vanished, before both", true, future, future, 2, nil, true},
		{"vanished, past the re-take deadline", true, past, future, 0, errAbsent, false},
	}
	for _, vr := range variants {
		for _, tc := range cases {
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
			o.retakeBy, o.validBy = tc.retakeBy, tc.validBy
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
