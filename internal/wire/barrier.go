package wire

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// This file is the barrier: how a lane's fresh connection makes sure that
// nothing of a connection it gave up runs after it. Its rules, each with
// the test that fails when it breaks:
//
//   - Order holds across connections: a connection given up with requests
//     whose fate is unknown (a timeout, a network error, a panic) may still
//     deliver them to the master later, and a later request of the same key
//     on a fresh connection could overtake them (a Release undone by an
//     Extend's late re-take, an acquire that lands after its undo). So the
//     fresh connection's first commands, in the round trip that learns its
//     ID, kill the old one (CLIENT KILL ID ... ADDR ..., both filters, so
//     that a restarted master's new client with a reused ID is spared):
//     once the master has answered it, nothing of the old connection runs
//     any more, and only then does a lock request go out. Until then the
//     old connection stays out of the client's pool, so that the
//     application never gets a connection the lane will kill; a fresh
//     connection whose barrier got no answer carried no lock request and
//     goes back, so a lane holds at most one such connection however long
//     the master stalls, and one whose socket failed goes back at once
//     (go-redis discards it). A fresh connection's round trip is no answer
//     when the master replies BUSY or LOADING: the barrier and the run_id
//     wait for the next. (TestReleaseIsNotUndoneByStraggler,
//     TestBarrierKillsNoStranger, TestBarrierKillsNoStrangerAfterARefusal,
//     TestPausedWritesDoNotDrainThePool,
//     TestVictimOnAPoolOfOneIsKilledAfterTheStall,
//     TestDryPoolGivesTheApplicationNoVictim,
//     TestConnectionTakenWhileBusyKeepsTheBarrier)
//   - Where that barrier is not available (an ACL that denies CLIENT KILL
//     or CLIENT INFO, a Redis before 6.2, a Cluster master), a straggler can
//     still land after a later request: an Extend never shortens a key
//     (extend.lua), so it cannot cut a renewed lock, and its re-take is
//     refused past its deadline by the master's clock; a straggling acquire
//     or re-take that lands after a Release keeps the key until its TTL.
//     (TestShorterStragglerCannotShortenAHeldLock)

// A victim is a connection to kill before the next batch. One that failed
// with a network error or a timeout is given back at once (go-redis
// discards it: it never reaches the application); one given up for another
// reason (a hook's error, a panic) stays out of the client's pool until it
// is killed (conn); when the pool runs dry meanwhile, it is killed on a
// connection dialed outside the pool (killOutside).
type victim struct {
	id   int64
	addr string
	conn *redis.Conn // nil once given back
}

// barrier reports whether a connection given up now would be killed before
// the next batch.
func (t *redisTransport) barrier() bool {
	return t.std != nil && t.st.killAllowed() && t.id != 0
}

// drop gives up the lane's connection; failed says go-redis saw its socket
// fail (it then discards it when given back). With the barrier, the next
// connection kills it first, and one that did not fail (a hook's error, a
// panic) stays out of the client's pool until then, so that the
// application never gets a connection the lane will kill; without, it goes
// back.
func (t *redisTransport) drop(failed bool) {
	if t.conn == nil {
		return
	}
	switch {
	case !t.barrier():
		t.conn.Close()
	case failed:
		t.conn.Close()
		t.kill = append(t.kill, victim{t.id, t.addr, nil})
	default:
		t.kill = append(t.kill, victim{t.id, t.addr, t.conn})
	}
	t.conn, t.pipe, t.id = nil, nil, 0
}

// holdsVictims reports whether a victim is still held out of the pool.
func (t *redisTransport) holdsVictims() bool {
	for _, v := range t.kill {
		if v.conn != nil {
			return true
		}
	}
	return false
}

// killOutside runs the barrier on a connection dialed for it alone, with
// the client's options but none of its hooks or pool, and gives the
// victims back once the master has killed them: a victim must not reach
// the application alive, since the barrier would kill it under its user.
func (t *redisTransport) killOutside(ctx context.Context) error {
	o := *t.std.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	rdb := redis.NewClient(&o)
	defer rdb.Close()
	kills := t.killCmds(ctx)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range kills {
			_ = p.Process(ctx, k)
		}
		return nil
	})
	if !t.killed(kills) {
		return fmt.Errorf("%w (%w)", errBarrier, err)
	}
	return nil
}

// killCmds returns the barrier: a CLIENT KILL for each victim.
func (t *redisTransport) killCmds(ctx context.Context) []*redis.Cmd {
	kills := make([]*redis.Cmd, len(t.kill))
	for i, v := range t.kill {
		kills[i] = redis.NewCmd(ctx, "client", "kill", "id", v.id, "addr", v.addr)
	}
	return kills
}

// killed reports whether the master ran every kill of the barrier, and if
// so lets the victims go: dead now, the pool's health check discards them.
// go-redis gives a pipeline's network error to all of its commands, those
// answered too: a reply read is in Val.
func (t *redisTransport) killed(kills []*redis.Cmd) bool {
	for _, k := range kills {
		if !replied(k) && !RefusedCommand(k.Err()) {
			return false
		}
	}
	for _, v := range t.kill {
		if v.conn != nil {
			v.conn.Close()
		}
	}
	clear(t.kill)
	t.kill = t.kill[:0]
	return true
}

// errBarrier fails a batch whose fresh connection could not kill the
// connections given up before it: the master did not answer.
var errBarrier = fmt.Errorf("%w: the master did not run the barrier before it", ErrNoReply)

// RefusedCommand reports whether err says the command itself is not
// allowed or not known: NOPERM, or an unknown subcommand or option. Other
// error replies (BUSY, LOADING) say nothing of it.
func RefusedCommand(err error) bool {
	if !isReply(err) {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "NOPERM") || strings.Contains(s, "nknown subcommand") || strings.Contains(s, "syntax error") || strings.Contains(s, "nknown command")
}
