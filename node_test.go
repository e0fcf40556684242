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

// TestScriptsLoadedBeforeFirstUse: with only some of our scripts in the
// master's cache, an Extend queued before a Release of the same lock must
// still run first, not be rerun after it (and re-take the released key).
func TestScriptsLoadedBeforeFirstUse(t *testing.T) {
	ms, cs := minis(t, 1)
	ctx := context.Background()
	if err := cs[0].ScriptLoad(ctx, releaseScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	n := newNode(cs[0], "m", false, &wg)
	defer func() { n.close(); wg.Wait() }()
	ms[0].Set("k", "tok")
	rd := &round{replies: make(chan reply, 2)}
	deadline := time.Now().Add(time.Second)
	n.exec([]*request{
		{kind: opExtend, key: "k", token: "tok", ttlMs: 60000, deadline: deadline, rd: rd, idx: 0},
		{kind: opRelease, key: "k", token: "tok", deadline: deadline, rd: rd, idx: 1},
	}, cs[0].Pipeline())
	for range 2 {
		if r := <-rd.replies; r.err != nil {
			t.Fatalf("request %d: %v", r.idx, r.err)
		}
	}
	if ms[0].Exists("k") {
		t.Fatal("the Extend ran after the Release and re-took the key")
	}
}

// TestRaiseDropsMastersNotRaised: a master whose counter cannot be raised to
// the fence no longer counts toward the quorum.
func TestRaiseDropsMastersNotRaised(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing())
	ms[0].Set("k", "tok")
	ms[1].Set("k", "tok")
	ms[2].Set("k", "other") // lost between the acquire and the raise
	out := &outcome{nodes: make([]NodeError, 3), vals: []int64{10, 1, 1}, ok: 3}
	fence := c.raise(context.Background(), out, request{key: "k", ckey: "{k}:fence", token: "tok"}, time.Second)
	if fence != 10 || out.ok != 2 || out.nodes[2].Err == nil || out.nodes[1].Err != nil {
		t.Fatalf("fence %d ok %d nodes %v", fence, out.ok, out.nodes)
	}
	if v, _ := ms[1].Get("{k}:fence"); v != "10" {
		t.Fatalf("master 1's counter %q, want 10", v)
	}
	if ms[2].Exists("{k}:fence") {
		t.Fatal("raised the counter of a master where the lock is not ours")
	}
}
