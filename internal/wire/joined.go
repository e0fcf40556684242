package wire

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
)

// Extends of plain lock keys (one key, no fence, not a set) that follow
// one another in a batch to a standalone master go as one call of
// extend_batch.lua, a join: a renewal costs the master and the client
// less than a call of extend.lua each. The rules, each with the test that
// fails when it breaks:
//
//   - A join answers each request as its own call of extend.lua would,
//     an error on one key included (TestExtendBatchAnswersAsExtendDoes),
//     and leaves the connection in step after such an error
//     (TestAJoinsKeyErrorsLeaveTheConnectionInStep).
//   - Only neighbours join, so the master runs a batch's requests in the
//     order they came: an Extend never runs after the Release that
//     followed it, nor before the one that came before it
//     (TestExtendBatchAnswersAsExtendDoes).
//   - Each request keeps its own command, which the join's reply fills:
//     whatever reads a request's reply (result, the reruns after a
//     NOSCRIPT, the drop of a broken connection) reads it as if the
//     request had gone alone (TestJoinedExtendsAfterAScriptFlush).
//   - Joins go only to a master that took our SCRIPT LOAD of every script
//     (state.loaded), so that a join never finds its script missing where
//     the others are (an ACL that denies SCRIPT: requests go as EVAL);
//     see exec for another process that reloads its own scripts only
//     (TestAJoinThatFindsItsScriptMissingIsNotRunAfterALaterRelease).
//   - Joins go only to a master whose INFO says it is a standalone Redis,
//     and stop for good once the master refuses one with an error of the
//     whole call (a proxy in front of shards answers CROSSSLOT): that
//     batch's Extends fail on that master, as any failure of a master,
//     and later ones go alone (TestJoinsGoOnlyToAStandaloneRedis,
//     TestAMasterThatRefusesAJoinGetsNoMore). A READONLY (a master now a
//     replica) is not a refusal of joins: extend_batch.lua answers it for
//     the whole call, as a lone call gets it, and go-redis gives the
//     connection up. A proxy that answered INFO as a standalone Redis and
//     ran a script's keys on the shard of its first key alone, without
//     refusing a call whose keys span shards, would run a join's other
//     keys on the wrong shard: redlock knows of no such proxy, and takes
//     its masters to be Redis servers.
//   - A request sent as EVAL (a master that could not load the scripts)
//     goes alone.

// joinMax bounds the keys of one join: the master runs a join without a
// break, and 128 keys take it well under a millisecond.
const joinMax = 128

// The values of state.joins.
const (
	joinsUnknown = iota
	joinsAllowed
	joinsRefused
)

// sawMode notes the master's redis_mode (INFO server): joins go to a
// standalone master only.
func (st *state) sawMode(mode string) {
	if mode == "standalone" {
		st.joins.CompareAndSwap(joinsUnknown, joinsAllowed)
	} else {
		st.joins.CompareAndSwap(joinsAllowed, joinsUnknown)
	}
}

// A join is one call of extend_batch.lua and the requests it carries.
type join struct {
	cmd  *redis.Cmd
	reqs []*request
}

// joinable reports whether r may go in a join.
func joinable(r *request) bool {
	t := &r.op.target
	return r.kind() == KindExtend && t.set == nil && t.ckey == nil && !r.eval
}

// appendCmds appends to t.cmds the commands that carry batch, in order:
// where the master takes joins, each run of two joinable requests or more
// as joins, the others as they are.
func (t *redisTransport) appendCmds(ctx context.Context, batch []*request) {
	joins := t.st.joins.Load() == joinsAllowed && t.st.loaded.Load()
	for i := 0; i < len(batch); {
		j := i
		for joins && j < len(batch) && j-i < joinMax && joinable(batch[j]) {
			j++
		}
		if j-i < 2 {
			t.cmds = append(t.cmds, batch[i].cmd)
			i++
			continue
		}
		t.cmds = append(t.cmds, t.join(ctx, batch[i:j]))
		i = j
	}
}

// join makes the join of rs, whose commands build made: a join's
// arguments are its requests' own (extend.lua's KEYS and ARGV, in
// request.build's order).
func (t *redisTransport) join(ctx context.Context, rs []*request) *redis.Cmd {
	i := len(t.joins)
	t.joins = append(t.joins, join{})
	if len(t.joinArgv) <= i {
		t.joinArgv = append(t.joinArgv, nil)
	}
	jn := &t.joins[i]
	jn.reqs = rs
	a := t.joinArgv[i][:0]
	a = append(a, "evalsha", scripts.ExtendBatch.SHAArg, len(rs))
	for _, r := range rs {
		a = append(a, r.cmd.Args()[3]) // KEYS[1]
	}
	for _, r := range rs {
		ra := r.cmd.Args() // evalsha, sha, 1, key, token, ttl, retake[, valid]
		a = append(a, ra[4], ra[5], ra[6])
		if len(ra) > 7 {
			a = append(a, ra[7])
		} else {
			a = append(a, "")
		}
	}
	t.joinArgv[i] = a // go-redis is done with it when Exec returns: it serves the next batch
	jn.cmd = redis.NewCmd(ctx, a...)
	return jn.cmd
}

// split fills the commands of the joins' requests from the joins' replies,
// and forgets the joins.
func (t *redisTransport) split() {
	for i := range t.joins {
		jn := &t.joins[i]
		vals, err := jn.cmd.Slice()
		switch {
		case err == nil && len(vals) != len(jn.reqs):
			err = errJoinReply
		case isReply(err) && !noScript(err) && !ranNothing(err): // READONLY too is ranNothing's
			t.st.joins.Store(joinsRefused)
		}
		for k, r := range jn.reqs {
			if err != nil {
				r.cmd.SetErr(err)
				continue
			}
			switch v := vals[k].(type) {
			case int64:
				r.cmd.SetVal(v)
			case string:
				r.cmd.SetErr(keyError(v))
			default:
				r.cmd.SetErr(errJoinReply)
			}
		}
		jn.reqs, jn.cmd = nil, nil
		clear(t.joinArgv[i])
		t.joinArgv[i] = t.joinArgv[i][:0]
	}
	t.joins = t.joins[:0]
}

// A keyError is the error reply one key of a join got, sent as a string
// (extend_batch.lua). It is a reply, as go-redis's are (isReply).
type keyError string

func (e keyError) Error() string { return string(e) }
func (keyError) RedisError()     {}

// errJoinReply is a join's failure when the master answered it with
// something other than extend_batch.lua's answer: not a reply of the
// script, so the connection is given up.
var errJoinReply = errors.New("redlock: a batch of extends was answered with something else than its replies")
