package wire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCommandsAlias guards what the reuse of commands leans on: a go-redis
// command keeps the argument slice it was made with. If a go-redis release
// changes that, this fails, and the masters fall back to fresh commands.
func TestCommandsAlias(t *testing.T) {
	if !commandsAlias() {
		t.Fatal("go-redis copies a command's arguments: reused commands would send stale ones (the masters now make fresh ones)")
	}
	r := &request{op: Acquire(NewTarget("k1", "", "t1"), int64(1000), nil)}
	r.build(false, false)
	first := r.cmd
	r.op = Acquire(NewTarget("k2", "", "t2"), int64(2000), nil)
	r.build(false, false)
	if r.cmd != first {
		t.Fatal("the command was not reused")
	}
	if args := r.cmd.Args(); args[1] != "k2" || args[2] != "t2" || args[5] != int64(2000) {
		t.Fatalf("a reused command sends %v, want the second request's arguments", args)
	}
}

// TestResultDecoding: what each reply means, for each kind of request.
func TestResultDecoding(t *testing.T) {
	nilReply := redis.Nil
	boom := errors.New("i/o timeout")
	for _, tc := range []struct {
		name    string
		kind    Kind
		again   bool
		val     any
		err     error
		wantVal int64
		wantErr error
	}{
		{"acquire set", KindAcquire, false, "OK", nil, 0, nil},
		{"acquire held", KindAcquire, false, nil, nilReply, 0, ErrTaken},
		{"acquire failed", KindAcquire, false, nil, boom, 0, boom},
		{"acquire again ours", KindAcquire, true, int64(1), nil, 1, nil},
		{"acquire again held", KindAcquire, true, int64(0), nil, 0, ErrTaken},
		{"fenced acquire", KindAcquireFenced, false, int64(7), nil, 7, nil},
		{"fenced acquire held", KindAcquireFenced, false, int64(0), nil, 0, ErrTaken},
		{"extend", KindExtend, false, int64(1), nil, 1, nil},
		{"extend re-took", KindExtend, false, int64(2), nil, 2, nil},
		{"extend held", KindExtend, false, int64(0), nil, 0, ErrTaken},
		{"extend absent", KindExtend, false, int64(-1), nil, 0, ErrAbsent},
		{"release", KindRelease, false, int64(1), nil, 1, nil},
		{"release absent", KindRelease, false, int64(-1), nil, 0, ErrAbsent},
		{"release held", KindRelease, false, int64(0), nil, 0, ErrTaken},
	} {
		r := &request{op: Op{kind: tc.kind}, again: tc.again}
		r.cmd = redis.NewCmd(context.Background())
		r.cmd.SetVal(tc.val)
		r.cmd.SetErr(tc.err)
		v, err := r.result(nil)
		if v != tc.wantVal || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, v, err, tc.wantVal, tc.wantErr)
		}
	}
}

// TestReleaseAfterAnEarlierOne: a Release of a lock that an earlier
// Release deleted, or may have reached, on this master (master 1 here),
// with the master seen to restart since the lock was obtained or not.
func TestReleaseAfterAnEarlierOne(t *testing.T) {
	obtained := time.Now()
	quiet := &state{epoch: obtained.Add(-time.Hour)}
	restarted := &state{epoch: obtained.Add(-time.Hour)}
	restarted.restarted.Store(int64(time.Hour + time.Second)) // a second after the obtain
	before := &state{epoch: obtained.Add(-time.Hour)}
	before.restarted.Store(int64(time.Hour - time.Second)) // a second before
	for _, tc := range []struct {
		name             string
		deleted, reached uint64
		st               *state
		val              int64
		want             error
	}{
		{"no earlier Release: gone", 0, 0, quiet, -1, ErrAbsent},
		{"no earlier Release: another's", 0, 0, quiet, 0, ErrTaken},
		{"deleted here: gone", 0b10, 0, restarted, -1, nil},
		{"deleted here: another's", 0b10, 0, restarted, 0, nil},
		{"deleted elsewhere", 0b01, 0, quiet, -1, ErrAbsent},
		{"reached: gone", 0, 0b10, quiet, -1, nil},
		{"reached: another's", 0, 0b10, quiet, 0, nil},
		{"reached, run_id unknown: gone", 0, 0b10, nil, -1, nil},
		{"reached, restarted before the obtain: gone", 0, 0b10, before, -1, nil},
		{"reached, restarted since: gone", 0, 0b10, restarted, -1, ErrAbsent},
		{"reached, restarted since: another's", 0, 0b10, restarted, 0, ErrTaken},
		{"reached elsewhere", 0, 0b01, quiet, -1, ErrAbsent},
	} {
		f := ReleaseFacts{Deleted: tc.deleted, Reached: tc.reached, Since: obtained, Known: 0b11}
		r := &request{op: Release(Target{}, nil, f), idx: 1}
		r.cmd = redis.NewCmd(context.Background())
		r.cmd.SetVal(tc.val)
		if _, err := r.result(tc.st); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A master whose process the Client did not know when the lock was
	// obtained may have restarted unseen: its empty key is nobody's doing.
	r := &request{op: Release(Target{}, nil, ReleaseFacts{Reached: 0b10, Since: obtained, Known: 0b01}), idx: 1}
	r.cmd = redis.NewCmd(context.Background())
	r.cmd.SetVal(int64(-1))
	if _, err := r.result(quiet); err != ErrAbsent {
		t.Errorf("reached, process unknown at the obtain: gone: %v, want %v", err, ErrAbsent)
	}
	if Bit(64) != 0 || Bit(63) != 1<<63 {
		t.Errorf("Bit(63) = %#x, Bit(64) = %#x", Bit(63), Bit(64))
	}
}
