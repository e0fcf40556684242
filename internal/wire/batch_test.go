package wire

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
)

// The transport's sending of one batch, on an in-process master.

// TestBatchDeliversEachReplyOnce sends one pipeline mixing acquires and
// scripts the master has never seen, and checks every request gets exactly
// its own answer once.
func TestBatchDeliversEachReplyOnce(t *testing.T) {
	ms, cs := minis(t, 1)
	m := newMaster(t, cs[0], Config{})
	ms[0].Set("mine", "tok")
	ms[0].Set("theirs", "other")
	ops := []Op{
		testOp(KindRelease, "mine", "", "tok", 0),                // nil
		testOp(KindAcquire, "free", "", "tok", 1000),             // nil
		testOp(KindRelease, "theirs", "", "tok", 0),              // ErrTaken
		testOp(KindAcquire, "theirs", "", "tok", 1000),           // ErrTaken
		testOp(KindExtend, "absent", "", "tok", 1000),            // nil (re-taken)
		testOp(KindRelease, "nothing", "", "tok", 0),             // ErrAbsent
		testOp(KindAcquireFenced, "f", "{f}:fence", "tok", 1000), // nil, counter 1
	}
	want := []error{nil, nil, ErrTaken, ErrTaken, nil, ErrAbsent, nil}
	got := execBatch(t, m, ops)
	for i, w := range want {
		if got[i] != w {
			t.Errorf("request %d (%v %v): got %v, want %v", i, ops[i].kind, ops[i].target.Key(), got[i], w)
		}
	}
}

// TestQueuedRequestsHonourDeadlineAndContext checks that a request whose
// caller gave up, or whose node timeout passed while it waited, is not sent.
func TestQueuedRequestsHonourDeadlineAndContext(t *testing.T) {
	ms, cs := minis(t, 1)
	m := newMaster(t, cs[0], Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := testOp(KindAcquire, "a", "", "t", 1000)
	a.Done = ctx.Done()
	b := testOp(KindAcquire, "b", "", "t", 1000)
	b.Deadline = time.Now().Add(-time.Millisecond)
	for i, err := range execBatch(t, m, []Op{a, b}) {
		if err == nil {
			t.Fatalf("request %d was sent", i)
		}
	}
	if ms[0].Exists("a") || ms[0].Exists("b") {
		t.Fatal("a dropped request reached the master")
	}
}

// TestScriptsLoadedBeforeFirstUse: with only some of our scripts in the
// master's cache, an Extend queued before a Release of the same lock must
// still run first, not be rerun after it (and re-take the released key).
func TestScriptsLoadedBeforeFirstUse(t *testing.T) {
	ms, cs := minis(t, 1)
	ctx := context.Background()
	if err := cs[0].ScriptLoad(ctx, scripts.Release.Src).Err(); err != nil {
		t.Fatal(err)
	}
	m := newMaster(t, cs[0], Config{})
	ms[0].Set("k", "tok")
	for i, err := range execBatch(t, m, []Op{
		testOp(KindExtend, "k", "", "tok", 60000),
		testOp(KindRelease, "k", "", "tok", 0),
	}) {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if ms[0].Exists("k") {
		t.Fatal("the Extend ran after the Release and re-took the key")
	}
}
