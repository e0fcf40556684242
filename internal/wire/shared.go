package wire

import (
	"context"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
)

// This file is a Cluster master's sending: through the client's own
// pipeline, which picks a pooled connection per shard, so that no lane
// holds a connection and no barrier is possible (barrier.go says what
// holds without one). Its rules, each with the test that fails when it
// breaks:
//
//   - Scripts are loaded on every shard (go-redis sends SCRIPT LOAD to all
//     of them) before the first script request. (TestScriptCacheFlushed)
//   - A Release that got no answer is kept and sent again through the
//     pooled connections at the lane's ticks, as on a standalone master,
//     and an idle lane with nothing kept stops ticking.
//     (TestClusterMasterSendsItsKeptReleases)
//   - A batch's context ends at its deadline, so that go-redis's redirect
//     backoff ends there too, and the shards' lanes are used only once a
//     command was answered: go-redis has its slot map (shards.go).
//     (TestColdFrozenClusterHoldsNoCallerPastItsContext)

// sendShared sends batch through the client's own pipeline: a Cluster
// picks a pooled connection per shard (no barrier is possible across
// them). Its context is cancelled at the deadline, so that go-redis's
// redirect backoff ends there too.
func (t *redisTransport) sendShared(ctx context.Context, batch []*request, load bool) {
	at, _ := ctx.Deadline()
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), at)
	defer cancel()
	if load {
		t.loadScripts(cctx) // a Cluster: SCRIPT LOAD goes to every shard
	}
	defer t.sawSlots(batch)
	if len(batch) == 1 {
		_ = t.rdb.Process(cctx, batch[0].cmd)
		return
	}
	pipe := t.rdb.Pipeline()
	for _, r := range batch {
		t.cmds = append(t.cmds, r.cmd)
	}
	_ = pipe.BatchProcess(cctx, t.cmds...)
	_, err := pipe.Exec(cctx)
	stamp(t.cmds, err)
	clear(t.cmds)
	t.cmds = t.cmds[:0]
}

// sawSlots notes, on a Cluster master, that go-redis has its slot map once
// a command of batch was answered: the shards' lanes may be used
// (shards.go).
func (t *redisTransport) sawSlots(batch []*request) {
	if !t.cluster || t.st.slotsKnown.Load() {
		return
	}
	for _, r := range batch {
		if r.cmd != nil && Answered(r.cmd.Err()) {
			t.st.slotsKnown.Store(true)
			return
		}
	}
}

// sendPendingShared sends the kept Releases of a Cluster master through its
// pooled connections (no barrier: they may still run before a straggler),
// and keeps those that get no answer.
func (t *redisTransport) sendPendingShared(now time.Time) {
	if !t.due(now) {
		return
	}
	var sent []keptRelease
	kept := t.pending[:0]
	for _, k := range t.pending {
		if now.Before(k.notBefore) { // a recheck, not due yet
			kept = append(kept, k)
		} else {
			sent = append(sent, k)
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
	reqs := make([]*request, len(sent))
	for i := range sent {
		reqs[i] = new(request)
		t.buildKept(reqs[i], &sent[i])
	}
	t.ctx = deadlineCtx{at: now.Add(t.budget)}
	t.sendShared(&t.ctx, reqs, false)
	for i, r := range reqs {
		switch {
		case !Answered(r.cmd.Err()):
			t.keepAgain(sent[i])
		case absentAgain(r.cmd):
			t.recheck(sent[i].op, time.Now())
		}
	}
}

// loadScripts loads every script on the master (on every shard of a
// Cluster: go-redis sends SCRIPT LOAD to all of them) before the first
// script request, so that no batch finds some of our scripts loaded and
// others not: a failed EVALSHA rerun after a later request of the same batch
// had run would reorder one lock's requests.
func (t *redisTransport) loadScripts(ctx context.Context) {
	for _, s := range scripts.All {
		if t.rdb.ScriptLoad(ctx, s.Src).Err() != nil {
			return
		}
	}
	t.st.loaded.Store(true)
}
