package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file encodes a request into a go-redis command and decodes the
// master's reply. It knows nothing of queues or connections.

type opKind uint8

const (
	opAcquire       opKind = iota // SET key token NX PX ttl
	opAcquireFenced               // acquireFencedScript
	opRaise                       // raiseScript
	opExtend                      // extendScript, or extendFencedScript with a counter
	opRelease                     // releaseScript, or keepScript with a TTL
	opAcquireSet                  // acquireSetScript: a lock on several keys (keyset.go)
	opAcquireWait                 // waitScript: a waiting Obtain's acquire (wake.go)
	opWatch                       // watchScript: Client.WaitReleased (wake.go)
)

// An op is what a round asks of every master. Its arguments are boxed once
// per round and shared by the round's requests.
type op struct {
	kind             opKind
	key, ckey, token any // strings; ckey is nil without fencing
	ttl, fence       any // int64 milliseconds, int64
	retakeBy         any // int64 Unix milliseconds: an Extend re-takes a vanished key only until then
	// validBy, for an Extend, is the end of the validity it serves, in
	// int64 Unix milliseconds: a master runs nothing of it past then
	// (extendScript). nil leaves the re-take deadline as that bound.
	validBy any
	// turn is a string: a waiting acquire's Client id and the turn queue it
	// carries (waitScript); for an opAcquire (a waiter's plain acquire),
	// the value to set (the token, the wait mark and the queue), nil for
	// the token alone.
	turn any
	// sharded has bit i set for a master that is a Redis Cluster: a
	// release there announces itself on a sharded channel (wake.go).
	sharded  uint64
	deadline time.Time
	done     <-chan struct{} // the caller's context; a request it ends before sending is dropped
	// vals is the caller's context, for its values only (a span for a
	// go-redis hook); it lives as long as the request.
	vals   context.Context
	inline bool // may run on the caller's goroutine: the caller waits for it
	// again marks an acquire that may have run already (sent a second
	// time after the master closed its connection): it goes in a form safe
	// to run twice (see build, result). A Release sent again so is marked
	// reached instead.
	again bool
	// For a Release: the masters (bit i for master i) where an earlier
	// Release of the same lock deleted the key (deleted) or may have
	// (reached: sent before keyEnd, the lock's validity end when its first
	// Release began, and no answer came). A Release that finds the key
	// gone, or another owner's, on such a master finds what the earlier one
	// did, not a lapse, unless the master is seen to have restarted since
	// the lock was obtained (since; see deletedBefore). stale is when a
	// Release kept for a master that did not answer becomes pointless: the
	// key has expired by then.
	deleted, reached     uint64
	known                uint64 // the lock's masters whose process the Client knew when it was obtained (Lock.known)
	keyEnd, since, stale time.Time
	// recheck, for a Release by a handle that did not obtain its lock
	// (Client.Attach), is when to send it once more to a master where it
	// found the key absent: the original Obtain's request there may still
	// be on its way, and land after it (TestHandOverLeavesNoStrayKey).
	// notBefore, for a kept Release, is when it may go: its recheck.
	recheck, notBefore time.Time
	// halt, for an Extend, is the lock's releasing flag: a request still
	// queued when a Release has begun is not sent, so that it cannot
	// re-take a key the Release deleted.
	halt *atomic.Bool
	// set, for a lock on several keys, is its keys: every kind of request
	// on it is a script on the whole set (keyset.go). nil for one key.
	set *keySet
}

// maxMasters is the most masters a Client takes: each has a bit in a
// uint64 mask (bit).
const maxMasters = 64

// bit is master i's bit in a mask of masters; 0 past the 64th, which New
// refuses.
func bit(i int) uint64 {
	if i >= 64 {
		return 0
	}
	return 1 << i
}

// newOp boxes a lock's key, counter key and token, for an op of kind that
// takes no TTL or fence; with sets those.
func newOp(kind opKind, key, ckey, token string) op {
	o := op{kind: kind, key: key, token: token}
	if ckey != "" {
		o.ckey = ckey
	}
	return o
}

// with returns o for another kind of request on the same lock, reusing its
// boxed key and token. ttl is the boxed TTL in milliseconds (see
// Client.boxTTL), for the kinds that take one; fence is boxed only for the
// kinds that send it.
func (o op) with(kind opKind, ttl any, fence int64) op {
	o.kind, o.ttl, o.fence, o.retakeBy, o.validBy, o.turn = kind, ttl, nil, nil, nil, nil
	if kind == opRaise || (kind == opExtend && o.ckey != nil) {
		o.fence = fence
	}
	return o
}

// maxArgs is the most arguments a request's command has (EVALSHA of the
// fenced extend).
const maxArgs = 10

// A request is one op on one master. Requests are pooled: the node returns
// one to the pool once it has delivered its reply.
type request struct {
	op
	idx  int    // the master's position, for the reply
	rd   *round // where the reply goes; nil when nobody waits for it
	cmd  *redis.Cmd
	argv [maxArgs]any // backs cmd's arguments

	// The reply, set by the transport (or the lane, for a request it did
	// not send) and delivered by the lane.
	val int64
	err error

	// With WithReplicaAcks, for a request that wants them (wantsAcks): the
	// answer of the WAIT that followed it, the replicas that acknowledged
	// (acked) or why there is no count (ackErr), and the WAIT's timeout
	// in milliseconds (ackMs).
	acked, ackMs int64
	ackErr       error

	// Commands kept for reuse, by their number of arguments: a command's
	// arguments are r.argv[:n], refilled for each request.
	cmds [maxArgs + 1]*redis.Cmd

	// skew is the master's clock offset in ms (node.clock), which the
	// transport sets before build: an Extend's bounds, the re-take
	// deadline and the validity's end, travel in the op as the client's
	// wall clock reads them, shared by the round's requests, and reach
	// each master as its own clock reads them (bounds). eval says build
	// made an EVAL, for a rebuild with another offset (transport.rebase).
	skew  int64
	eval  bool
	bound [2]unixMs // back the bounds' arguments when skew is not 0
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

// bounds returns the re-take deadline and the validity's end of r, an
// Extend, as its master's clock reads them: the op's values (the client's
// wall clock) plus the master's offset. With no offset, or a bound not
// sent (nil) or never met (0: Attach's re-take), the op's own box.
func (r *request) bounds() (retake, valid any) {
	return r.shift(0, r.retakeBy), r.shift(1, r.validBy)
}

func (r *request) shift(i int, v any) any {
	ms, ok := v.(int64)
	if !ok || ms <= 0 || r.skew == 0 {
		return v
	}
	r.bound[i].ms = ms + r.skew
	return &r.bound[i]
}

// build makes r's command: EVALSHA, or EVAL when eval is set. With fresh
// set it makes a new command rather than reuse one.
func (r *request) build(eval, fresh bool) {
	var s *script
	a := r.argv[:0]
	r.eval = eval
	if r.set != nil {
		if r.kind != opExtend {
			s, a = r.set.args(&r.op, a, r.sharded&bit(r.idx) != 0)
			r.script(s, a, eval, fresh)
			return
		}
		retake, valid := r.bounds()
		was := r.retakeBy
		r.retakeBy = retake // in the set's own arguments
		s, a = r.set.args(&r.op, a, r.sharded&bit(r.idx) != 0)
		r.retakeBy = was
		if valid != nil {
			a = append(a, valid) // last, after the set's own arguments (extendSetScript)
		}
		r.script(s, a, eval, fresh)
		return
	}
	switch r.kind {
	case opAcquire:
		if r.again { // our own key from the first run holds the lock
			s, a = &acquireAgainScript, append(a, nil, nil, 1, r.key, r.token, r.ttl)
			if r.turn != nil { // a waiter's plain acquire: the same value as the first run's
				a = append(a, r.turn)
			}
			break
		}
		v := r.token
		if r.turn != nil { // a waiter's plain acquire: the token, the mark and the turn queue
			v = r.turn
		}
		a = append(a, "set", r.key, v, "nx", "px", r.ttl)
		r.cmd = r.command(a, fresh)
		return
	case opAcquireFenced:
		s = &acquireFencedScript
		if r.again {
			s = &acquireFencedAgainScript
		}
		a = append(a, nil, nil, 2, r.key, r.ckey, r.token, r.ttl)
	case opRaise:
		s, a = &raiseScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.fence)
	case opExtend:
		retake, valid := r.bounds()
		if r.ckey == nil {
			s, a = &extendScript, append(a, nil, nil, 1, r.key, r.token, r.ttl, retake)
		} else {
			s, a = &extendFencedScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.ttl, r.fence, retake)
		}
		if valid != nil {
			a = append(a, valid)
		}
	case opAcquireWait: // safe to send again: it finds our own token
		if r.ckey == nil {
			s, a = &waitScript, append(a, nil, nil, 1, r.key, r.token, r.ttl, r.turn)
		} else {
			s, a = &waitScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.ttl, r.turn)
		}
	case opWatch:
		s, a = &watchScript, append(a, nil, nil, 1, r.key)
	default:
		if r.ttl != nil { // kept for the rest of a minimum hold
			s, a = &keepScript, append(a, nil, nil, 1, r.key, r.token, r.ttl)
		} else {
			s, a = &releaseScript, append(a, nil, nil, 1, r.key, r.token)
		}
		if r.sharded&bit(r.idx) != 0 {
			a = append(a, "s") // announce on the key's sharded channel
		}
	}
	r.script(s, a, eval, fresh)
}

// script makes r's command: s run on a, whose first two arguments it sets
// (EVAL and the source, or EVALSHA and the digest).
func (r *request) script(s *script, a []any, eval, fresh bool) {
	if eval {
		a[0], a[1] = "eval", s.srcArg
	} else {
		a[0], a[1] = "evalsha", s.shaArg
	}
	r.cmd = r.command(a, fresh)
}

// command returns a command whose arguments are a, a prefix of r.argv: one
// of r's own commands with as many arguments, reset, or a new one when
// fresh is set, or when a has outgrown r.argv (a lock on several keys). A
// command allocates; reusing one makes a round to five masters ten
// allocations cheaper. go-redis is done with a command when
// Process or Exec returns (a hook that kept one for later would see it
// reused). A node never reuses commands on a sharded client (Cluster,
// Ring): go-redis keeps a command's hash slot in it.
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
// go-redis that copied would send stale arguments; the nodes then make a
// fresh command for every request instead.
func commandsAlias() bool {
	a := []any{"get", "a"}
	c := redis.NewCmd(context.Background(), a...)
	a[1] = "b"
	args := c.Args()
	return len(args) == 2 && args[1] == "b"
}

// result reads the master's answer to r: the counter for a fenced acquire
// (for a set's acquire, the fence, or the position of the key another
// owner holds), and nil, ErrTaken, errAbsent or the failure. n, when known, says whether
// the master restarted (see deletedBefore).
func (r *request) result(n *node) (int64, error) {
	err := r.cmd.Err()
	if r.kind == opAcquire && !r.again {
		if err == redis.Nil {
			return 0, ErrTaken
		}
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	if r.kind == opAcquireWait {
		return r.pair()
	}
	v, err := r.cmd.Int64()
	if err != nil {
		return 0, err
	}
	if r.kind == opWatch {
		if v == -2 {
			return 0, errAbsent
		}
		return v, nil
	}
	switch {
	case v > 0:
		return v, nil
	case r.kind == opAcquireSet: // -i: the set's i-th key is another owner's
		return -v, ErrTaken
	case r.kind == opRelease && r.deletedBefore(n):
		return 0, nil
	case r.kind == opExtend && v == -2:
		return 0, errPastValidity
	case v == 0:
		return 0, ErrTaken
	default:
		return 0, errAbsent
	}
}

// errPastValidity is the answer of a master that ran an Extend past the
// end of the validity it served, by its clock, and so did nothing
// (extendScript). Its reply came before the request's deadline, by the
// client's clock, which only a master clock that reads ahead of the
// bound it was sent allows (its offset unknown, measured low, or stale
// after a jump: node.sawClock): a failure of that master's, not a
// refusal, so that a clock alone never makes a lock lost; but an answer,
// so the master is not reported down (Client.health).
// (TestStaleClockOffsetFailsThatMasterOnly)
var errPastValidity = errors.New("redlock: not extended: the master's clock was past the lock's validity end (is it ahead of the client's?)")

// pair reads the {flag, number} reply of waitScript: the fence (or 0) when
// taken, or the key's PTTL with ErrTaken when held by another owner.
func (r *request) pair() (int64, error) {
	vs, err := r.cmd.Slice()
	if err != nil {
		return 0, err
	}
	if len(vs) != 2 {
		return 0, fmt.Errorf("redlock: unexpected reply %v", vs)
	}
	n, _ := vs[1].(int64)
	if f, _ := vs[0].(int64); f == 1 {
		return n, nil
	}
	return n, ErrTaken
}

// deletedBefore reports whether an earlier Release of the lock deleted its
// key on r's master: it said so, or it was sent while the key was still
// ours and no answer came, and the master is not seen to have restarted
// since the lock was obtained (a restart without persistence loses the
// key, and another owner may have held the lock since). A master whose
// run_id the client may not read (INFO denied) is not seen to restart; one
// whose run_id the Client had not learnt yet when the lock was obtained
// (it never answered the Obtain) may have restarted unseen, and its empty
// key is nobody's doing (TestRetriedReleaseReportsALossOnAMasterNeverHeardFrom).
func (r *request) deletedBefore(n *node) bool {
	b := bit(r.idx)
	if r.deleted&b != 0 {
		return true
	}
	return r.reached&b != 0 && (n == nil || r.known&b != 0 && !n.restartedAfter(r.since))
}

// wantsAcks reports whether r is a grant that, with WithReplicaAcks, counts
// only once replicas acknowledged it: an acquire, a fence raise, an Extend.
// A Release does not wait: a replica that missed it keeps the key until its
// TTL, a delay, not a second holder. Nor does WaitReleased's look at a key
// (opWatch): it grants nothing, and the wait mark it may leave is a hint.
func (r *request) wantsAcks() bool { return r.kind != opRelease && r.kind != opWatch }

// errNoWait marks a request that wants acknowledgements whose WAIT did not
// run: never seen unless a send left the WAIT out.
var errNoWait = errors.New("redlock: no WAIT ran after the write")

// ackResult is the error of a request that wants acks (wantsAcks) and was
// granted: nil when at least want replicas acknowledged it.
func (r *request) ackResult(want int) error {
	switch {
	case r.ackErr != nil:
		return &ReplicaError{Want: want, Timeout: time.Duration(r.ackMs) * time.Millisecond, Err: r.ackErr}
	case r.acked < int64(want):
		return &ReplicaError{Acked: int(r.acked), Want: want, Timeout: time.Duration(r.ackMs) * time.Millisecond}
	}
	return nil
}

// dropped says why r should not be sent at all: its caller gave up, or its
// deadline has passed while it waited in the queue.
func (r *request) dropped(now time.Time) error {
	select {
	case <-r.done:
		return errSkipped
	default:
	}
	if r.halt != nil && r.halt.Load() {
		return errReleasing
	}
	if !now.Before(r.deadline) {
		return errQueued
	}
	return nil
}

func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
