package redlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wake"
	"github.com/redlock-go/redlock/internal/wire"
)

// Attach returns a handle on a lock that is already held under token, so
// that another goroutine or process can extend, release or keep it alive:
// the lock's key, its [Lock.Token] (the value of the lock key, which
// `redlock run` passes to its command as REDLOCK_TOKEN) and, with fencing,
// its [Lock.Fence], which Attach takes on trust.
//
// Before it returns, Attach confirms the lock on the masters: it resets the
// key's TTL to ttl on every master where the key holds token, never
// re-taking a key that has vanished (that could revive a lock that lapsed).
// It succeeds when a quorum confirmed within the validity, counted from
// the start of the call as for [Client.Obtain]. It returns an error matching
// [ErrLockLost] when refusals rule out a quorum (the token is gone from more
// than N - quorum masters), and one matching [ErrUnavailable] when too few
// masters answered. The original handle, if it still exists, holds the
// same lock: keep one of them renewing it. A token that contains "!" (the
// mark a waiter appends to a held key's value, see [WithWait]) is no lock's
// token: it is refused before any request, with an error matching both
// ErrLockLost and [ErrInvalidArgument].
//
// A master that runs the confirmation after that validity would have ended,
// by its clock, does nothing, as for [Lock.Extend].
//
// Hand-over: [Client.Obtain] returns once a quorum granted the lock, and
// its request to another master may still be on its way when the lock is
// handed over. So a Release of an attached handle that finds the key
// absent on a master sends that master its Release once more, after the
// longer of this Client's node timeout and 500ms, the longest default
// node timeout (owner-checked: it never deletes another owner's key),
// where the original Obtain's late key, landing after the first Release,
// would otherwise stay for its whole TTL. The handle's Client owns that
// second Release: [Client.Close] waits for its time and sends it. A
// request of the original Obtain later than that (an obtaining Client with
// a longer node timeout, a network that holds it longer) still leaves its
// key until its TTL; so does a hand-over to a handle that never releases.
//
// A lock on several keys ([Client.ObtainMulti]) is attached with
// [Client.AttachMulti] and its whole set: Attach of its first key alone
// would renew that key only, and the others would expire while the handle
// still counted on them.
func (c *Client) Attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (*Lock, error) {
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return c.attach(ctx, key, nil, token, ttl, fence)
}

// AttachMulti is [Client.Attach] for a lock on several keys: keys is the
// set given to [Client.ObtainMulti] (its [Lock.Keys]), checked as
// ObtainMulti checks it; the handle confirms, extends and releases every
// key of the set, owner-checked key by key, as the original handle does.
func (c *Client) AttachMulti(ctx context.Context, keys []string, token string, ttl time.Duration, fence int64) (*Lock, error) {
	key, set, ttl, err := c.checkSet(ctx, keys, ttl)
	if err != nil {
		return nil, err
	}
	return c.attach(ctx, key, set, token, ttl, fence)
}

// attach is Attach after validation, for a key or a set.
func (c *Client) attach(ctx context.Context, key string, set *keySet, token string, ttl time.Duration, fence int64) (*Lock, error) {
	if token == "" {
		return nil, invalid("empty token")
	}
	if strings.Contains(token, wake.Mark) {
		// A key's value is its owner's token, with the wait mark after it
		// once a waiter found it held (internal/wake/turn.go): the scripts take a value
		// as ours when it is the token or the token and the mark, exact
		// only while no token contains the mark. No lock's token does.
		return nil, fmt.Errorf("%w (%w): token %q contains %q, the wait mark a waiter appends to a held key's value; no lock's token contains it (pass Lock.Token, or KeyState.Holder, which leave it out)", ErrLockLost, unprefixed{ErrInvalidArgument}, token, wake.Mark)
	}
	if fence < 0 || (fence > 0 && !c.cfg.fencing) {
		return nil, invalid("fence %d: a fence is >= 1, and only for a Client made WithFencing", fence)
	}
	full, ckey := c.cfg.keyPrefix+key, ""
	if c.cfg.fencing {
		ckey = counterKey(full)
	}
	start := time.Now()
	l := &Lock{c: c, key: key, token: token, fence: fence, obtained: start, attached: true, set: set}
	l.ttl.Store(int64(ttl))
	l.target = wire.NewTarget(full, ckey, token)
	if set != nil {
		l.target = set.wire.Target(token)
	}
	valid := ttl - c.cfg.drift(ttl)
	o := wire.Extend(l.target, c.boxTTL(ttl), fence, wire.Bounds{
		RetakeBy: 0, // never: the master's clock is always past it
		// The confirmation serves the validity this handle counts on if it
		// succeeds, from start: a master that runs it later (held up by the
		// network, or frozen with it in its socket) does nothing, as for an
		// Extend. The validity the original handle counts on is unknown
		// here; the request's own deadline would be tighter, but would make
		// every Attach fail on a master whose clock reads ahead of its
		// bounds by a node timeout (its offset unknown: the wire's
		// request.bounds).
		ValidBy: start.Add(valid).UnixMilli(),
	})
	timeout := c.cfg.timeout(ttl)
	rd := c.fanout(ctx, o, start.Add(timeout), timeout)
	defer rd.done()
	if rd.ok >= c.quorum && time.Since(start) < valid {
		l.until.Store(int64(start.Add(valid).Sub(c.epoch)))
		l.known = c.told()
		return l, nil
	}
	if rd.refused > len(c.nodes)-c.quorum {
		return nil, c.quorumError("attach", rd, ErrLockLost)
	}
	if rd.ok >= c.quorum {
		qe := c.quorumError("attach", rd, ErrLockLost)
		qe.why = fmt.Sprintf("confirmed too late for a %v TTL", ttl)
		return nil, qe
	}
	return nil, c.quorumError("attach", rd, nil)
}
