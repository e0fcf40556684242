package redlock

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestCommandsAlias guards what the reuse of commands leans on: a go-redis
// command keeps the argument slice it was made with. If a go-redis release
// changes that, this fails, and the nodes fall back to fresh commands.
func TestCommandsAlias(t *testing.T) {
	if !commandsAlias() {
		t.Fatal("go-redis copies a command's arguments: reused commands would send stale ones (the nodes now make fresh ones)")
	}
	r := &request{op: newOp(opAcquire, "k1", "", "t1").with(opAcquire, int64(1000), 0)}
	r.build(false, false)
	first := r.cmd
	r.op = newOp(opAcquire, "k2", "", "t2").with(opAcquire, int64(2000), 0)
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
		kind    opKind
		again   bool
		val     any
		err     error
		wantVal int64
		wantErr error
	}{
		{"acquire set", opAcquire, false, "OK", nil, 0, nil},
		{"acquire held", opAcquire, false, nil, nilReply, 0, ErrTaken},
		{"acquire failed", opAcquire, false, nil, boom, 0, boom},
		{"acquire again ours", opAcquire, true, int64(1), nil, 1, nil},
		{"acquire again held", opAcquire, true, int64(0), nil, 0, ErrTaken},
		{"fenced acquire", opAcquireFenced, false, int64(7), nil, 7, nil},
		{"fenced acquire held", opAcquireFenced, false, int64(0), nil, 0, ErrTaken},
		{"extend", opExtend, false, int64(1), nil, 1, nil},
		{"extend re-took", opExtend, false, int64(2), nil, 2, nil},
		{"extend held", opExtend, false, int64(0), nil, 0, ErrTaken},
		{"extend absent", opExtend, false, int64(-1), nil, 0, errAbsent},
		{"release", opRelease, false, int64(1), nil, 1, nil},
		{"release absent", opRelease, false, int64(-1), nil, 0, errAbsent},
		{"release again absent", opRelease, true, int64(-1), nil, 0, nil},
		{"release held", opRelease, false, int64(0), nil, 0, ErrTaken},
	} {
		r := &request{op: op{kind: tc.kind, again: tc.again}}
		r.cmd = redis.NewCmd(context.Background())
		r.cmd.SetVal(tc.val)
		r.cmd.SetErr(tc.err)
		v, err := r.result()
		if v != tc.wantVal || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, v, err, tc.wantVal, tc.wantErr)
		}
	}
}
