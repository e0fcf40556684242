package redlock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestBatchDeliversEachReplyOnce sends one pipeline mixing acquires and
// scripts the master has never seen (NOSCRIPT, then EVAL), and checks every
// request gets exactly its own answer once.
func TestBatchDeliversEachReplyOnce(t *testing.T) {
	ms, cs := minis(t, 1)
	var wg sync.WaitGroup
	n := newNode(cs[0], "m", false, &wg)
	defer func() { n.close(); wg.Wait() }()
	ms[0].Set("mine", "tok")
	ms[0].Set("theirs", "other")
	rd := &round{replies: make(chan reply, 16)}
	deadline := time.Now().Add(time.Second)
	reqs := []*request{
		{kind: opRelease, key: "mine", token: "tok"},                // nil
		{kind: opAcquire, key: "free", token: "tok", ttlMs: 1000},   // nil
		{kind: opRelease, key: "theirs", token: "tok"},              // ErrTaken
		{kind: opAcquire, key: "theirs", token: "tok", ttlMs: 1000}, // ErrTaken
		{kind: opExtend, key: "absent", token: "tok", ttlMs: 1000},  // nil (re-taken)
		{kind: opRelease, key: "nothing", token: "tok"},             // errAbsent
	}
	want := []error{nil, nil, ErrTaken, ErrTaken, nil, errAbsent}
	for i, r := range reqs {
		r.idx, r.rd, r.deadline = i, rd, deadline
	}
	n.exec(append([]*request(nil), reqs...), cs[0].Pipeline())
	got := map[int]error{}
	for range reqs {
		r := <-rd.replies
		if _, dup := got[r.idx]; dup {
			t.Fatalf("request %d answered twice", r.idx)
		}
		got[r.idx] = r.err
	}
	select {
	case r := <-rd.replies:
		t.Fatalf("extra reply %+v", r)
	default:
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("request %d (%v %s): got %v, want %v", i, reqs[i].kind, reqs[i].key, got[i], w)
		}
	}
}

// TestQueuedRequestsHonourDeadlineAndContext checks that a request whose
// caller gave up, or whose node timeout passed while it waited, is not sent.
func TestQueuedRequestsHonourDeadlineAndContext(t *testing.T) {
	ms, cs := minis(t, 1)
	var wg sync.WaitGroup
	n := newNode(cs[0], "m", false, &wg)
	defer func() { n.close(); wg.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rd := &round{replies: make(chan reply, 2)}
	n.exec([]*request{
		{kind: opAcquire, key: "a", token: "t", ttlMs: 1000, deadline: time.Now().Add(time.Second), done: ctx.Done(), rd: rd, idx: 0},
		{kind: opAcquire, key: "b", token: "t", ttlMs: 1000, deadline: time.Now().Add(-time.Millisecond), rd: rd, idx: 1},
	}, cs[0].Pipeline())
	for range 2 {
		if r := <-rd.replies; r.err == nil {
			t.Fatalf("request %d was sent", r.idx)
		}
	}
	if ms[0].Exists("a") || ms[0].Exists("b") {
		t.Fatal("a dropped request reached the master")
	}
}
