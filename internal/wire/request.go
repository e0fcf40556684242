package wire

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
)

// This file encodes a request into a go-redis command; result.go decodes
// the master's reply. Neither knows anything of queues or connections.

// maxArgs is the most arguments a request's command has (EVALSHA of the
// fenced extend).
const maxArgs = 10

// A request is one Op on one master. Requests are pooled: the master takes
// one back once it has delivered its reply (Master.deliver).
type request struct {
	op   Op
	idx  int  // the master's position, for the reply and the masks of ReleaseFacts
	sink Sink // where the reply goes; nil when nobody waits for it
	// cluster says the master is a Redis Cluster: a Release there
	// announces itself on the key's sharded channel (release.lua).
	cluster bool
	// again marks an acquire that may have run already (sent a second time
	// after the master closed its connection): it goes in a form safe to
	// run twice (see build, result). A Release sent again so is marked
	// Reached in its facts instead.
	again bool
	cmd   *redis.Cmd
	argv  [maxArgs]any // backs cmd's arguments

	// The reply, set by the transport (or the lane, for a request it did
	// not send) and delivered by the lane.
	val int64
	err error

	// With replica acks, for a request that wants them (wantsAcks): the
	// answer of the WAIT that followed it, the replicas that acknowledged
	// (acked) or why there is no count (ackErr), and the WAIT's timeout in
	// milliseconds (ackMs).
	acked, ackMs int64
	ackErr       error

	// Commands kept for reuse, by their number of arguments: a command's
	// arguments are r.argv[:n], refilled for each request.
	cmds [maxArgs + 1]*redis.Cmd

	// skew is the master's clock offset in ms (state.clock), which the
	// transport sets before build: an Extend's bounds travel in the Op as
	// the client's wall clock reads them, shared by the round's requests,
	// and reach each master as its own clock reads them (bounds). eval
	// says build made an EVAL, for a rebuild with another offset
	// (transport.rebase).
	skew  int64
	eval  bool
	bound [2]unixMs // the bounds' arguments: the request's own, so that an Extend allocates none
}

// A unixMs is a time in Unix milliseconds, a request's own argument: a
// pointer to it goes in the command's arguments, where a boxed int64
// would allocate for every request. go-redis writes it with
// MarshalBinary, into buf, and a hook that prints the command sees
// String.
type unixMs struct {
	ms  int64
	buf [20]byte
}

func (m *unixMs) MarshalBinary() ([]byte, error) { return strconv.AppendInt(m.buf[:0], m.ms, 10), nil }
func (m *unixMs) String() string                 { return strconv.FormatInt(m.ms, 10) }

// kind returns what r asks.
func (r *request) kind() Kind { return r.op.kind }

// bounds returns the re-take deadline and the validity's end of r, an
// Extend, as its master's clock reads them: the Op's values (the client's
// wall clock) plus the master's offset; a re-take deadline never met (0:
// Attach's) as it is, and no validity's end (nil) when the Op has none.
func (r *request) bounds() (retake, valid any) {
	retake = r.shift(0, r.op.extend.RetakeBy)
	if r.op.extend.ValidBy != 0 {
		valid = r.shift(1, r.op.extend.ValidBy)
	}
	return retake, valid
}

func (r *request) shift(i int, ms int64) *unixMs {
	if ms > 0 {
		ms += r.skew
	}
	r.bound[i].ms = ms
	return &r.bound[i]
}

// build makes r's command: EVALSHA, or EVAL when eval is set. With fresh
// set it makes a new command rather than reuse one.
func (r *request) build(eval, fresh bool) {
	var s *scripts.Script
	a := r.argv[:0]
	r.eval = eval
	o, t := &r.op, &r.op.target
	if t.set != nil {
		var retake, valid any
		if o.kind == KindExtend {
			retake, valid = r.bounds()
		}
		s, a = t.set.args(o, retake, a, r.cluster)
		if valid != nil {
			a = append(a, valid) // last, after the set's own arguments (extend_set.lua)
		}
		r.script(s, a, eval, fresh)
		return
	}
	switch o.kind {
	case KindAcquire:
		if r.again { // our own key from the first run holds the lock
			s, a = &scripts.AcquireAgain, append(a, nil, nil, 1, t.key, t.token, o.ttl)
			if o.value != nil { // a waiter's plain acquire: the same value as the first run's
				a = append(a, o.value)
			}
			break
		}
		v := t.token
		if o.value != nil { // a waiter's plain acquire: the token, the mark and the turn queue
			v = o.value
		}
		a = append(a, "set", t.key, v, "nx", "px", o.ttl)
		r.cmd = r.command(a, fresh)
		return
	case KindAcquireFenced:
		s = &scripts.AcquireFenced
		if r.again {
			s = &scripts.AcquireFencedAgain
		}
		a = append(a, nil, nil, 2, t.key, t.ckey, t.token, o.ttl)
	case KindRaise:
		s, a = &scripts.Raise, append(a, nil, nil, 2, t.key, t.ckey, t.token, o.fence)
	case KindExtend:
		retake, valid := r.bounds()
		if t.ckey == nil {
			s, a = &scripts.Extend, append(a, nil, nil, 1, t.key, t.token, o.ttl, retake)
		} else {
			s, a = &scripts.ExtendFenced, append(a, nil, nil, 2, t.key, t.ckey, t.token, o.ttl, o.fence, retake)
		}
		if valid != nil {
			a = append(a, valid)
		}
	case KindAcquireWait: // safe to send again: it finds our own token
		if t.ckey == nil {
			s, a = &scripts.Wait, append(a, nil, nil, 1, t.key, t.token, o.ttl, o.value)
		} else {
			s, a = &scripts.Wait, append(a, nil, nil, 2, t.key, t.ckey, t.token, o.ttl, o.value)
		}
	case KindWatch:
		s, a = &scripts.Watch, append(a, nil, nil, 1, t.key)
	default: // KindRelease
		if o.ttl != nil { // kept for the rest of a minimum hold
			s, a = &scripts.Keep, append(a, nil, nil, 1, t.key, t.token, o.ttl)
		} else {
			s, a = &scripts.Release, append(a, nil, nil, 1, t.key, t.token)
		}
		if r.cluster {
			a = append(a, "s") // announce on the key's sharded channel
		}
	}
	r.script(s, a, eval, fresh)
}

// script makes r's command: s run on a, whose first two arguments it sets
// (EVAL and the source, or EVALSHA and the digest).
func (r *request) script(s *scripts.Script, a []any, eval, fresh bool) {
	if eval {
		a[0], a[1] = "eval", s.SrcArg
	} else {
		a[0], a[1] = "evalsha", s.SHAArg
	}
	r.cmd = r.command(a, fresh)
}

// command returns a command whose arguments are a, a prefix of r.argv: one
// of r's own commands with as many arguments, reset, or a new one when
// fresh is set, or when a has outgrown r.argv (a lock on several keys). A
// command allocates; reusing one makes a round to five masters ten
// allocations cheaper. go-redis is done with a command when Process or
// Exec returns (a hook that kept one for later would see it reused). A
// master never reuses commands on a sharded client (Cluster, Ring):
// go-redis keeps a command's hash slot in it.
func (r *request) command(a []any, fresh bool) *redis.Cmd {
	if fresh || len(a) > maxArgs {
		return redis.NewCmd(context.Background(), a...)
	}
	c := r.cmds[len(a)]
	if c == nil {
		c = redis.NewCmd(context.Background(), a...)
		r.cmds[len(a)] = c
		return c
	}
	c.SetErr(nil)
	c.SetVal(nil)
	return c
}

// forget drops r's commands, which a failed go-redis call may still hold:
// they must not be reused for another request.
func (r *request) forget() {
	r.cmd = nil
	clear(r.cmds[:])
}

// commandsAlias reports whether a go-redis command keeps the argument
// slice it was made with, rather than a copy: the reuse of commands
// (request.command) refills that slice for each request, and needs it. A
// go-redis that copied would send stale arguments; the masters then make
// a fresh command for every request instead.
func commandsAlias() bool {
	a := []any{"get", "a"}
	c := redis.NewCmd(context.Background(), a...)
	a[1] = "b"
	args := c.Args()
	return len(args) == 2 && args[1] == "b"
}
