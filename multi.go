package redlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// MaxKeys is the most distinct keys one lock may hold ([Client.ObtainMulti]).
// A master runs each request on a set as one script, and runs nothing else
// meanwhile: the bound keeps that short (measured on a 2-core machine, a
// request on 64 keys took a master about 90µs, on one key 6µs), and the
// sets of resources one piece of work touches are small.
const MaxKeys = 64

// ObtainMulti takes the lock on every key of keys at once, all or none, for
// ttl, and returns them as one [Lock]: for work on a fixed set of resources
// (moving money between two accounts, a job that touches several). On each
// master one script takes the whole set: it sets every key only if none
// holds another owner's token. The lock is held when a quorum of masters
// took the whole set within its validity; retries, the validity, the undo
// of a failed attempt and the errors are those of [Client.Obtain]. A master
// that refused a set of two or more keys names the key it found held in its
// [NodeError] (Key). A set of one key is a lock on that key, as from
// [Client.Obtain].
//
// Calls on overlapping sets never deadlock: no master holds part of a set,
// and a failed attempt releases the set on every master that may have
// taken it. Under contention they take turns as contenders for one key do;
// give them a retry strategy ([WithRetry]), whose jitter keeps them from
// colliding again. [WithWait] is refused ([ErrInvalidArgument]): a set is
// not woken by releases. Waiters of a single key that a set holds are: the
// set's Release announces every key of it that a waiter marked.
//
// The lock acts as one from then on: [Lock.Extend], [Lock.Release],
// [Lock.Do], [Lock.KeepAlive] and a watchdog act on the whole set, one
// script per master, owner-checked key by key. A Release deletes every key
// of the set still ours and never another owner's. An Extend counts a
// master only where no key is another owner's, and re-takes the keys that
// vanished there as it does a single key. [Lock.Key] is the set's first
// key and [Lock.Keys] the whole set; an Observer's events name the lock by
// its first key. Single-key locks and sets exclude each other on a key
// they share.
//
// With [WithFencing], each key keeps its own counter, the one a single-key
// lock on it uses. The acquire increments every counter of the set and
// raises them all to the largest, on every master of the quorum, and that
// value is the lock's [Lock.Fence]. So, under Redlock's assumptions, it is
// above the fence of every earlier holder of each key of the set (alone or
// in another set), and every later holder of any of those keys gets a
// larger one: a resource guarded by one key checks the fence exactly as
// for a single-key lock, against the highest fence it has seen for that
// key ([FencedWrite]). The counters of a set move together, so the fences
// a key sees increase but skip values. A single counter for the whole set
// would not do: two overlapping sets would draw from different counters.
//
// keys holds at least one key and at most [MaxKeys] distinct keys; a key
// given twice counts once (the set of a, a is a), so Keys may be shorter.
// No keys, an empty key or too many are errors matching
// [ErrInvalidArgument], before any request. So is, when a master is a Redis
// Cluster, a set whose keys (prefix included) are not all in one hash
// slot: a Cluster runs a script on one slot only, so give the keys a
// common hash tag, {account}:a and {account}:b. Everything else is as for
// [Client.Obtain].
func (c *Client) ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	key, set, ttl, err := c.checkSet(ctx, keys, ttl)
	if err != nil {
		return nil, c.closedObtain(err)
	}
	oc, err := obtainOptions(opts, forObtain|forSet)
	if err != nil {
		return nil, err
	}
	oc.set = set
	return c.obtain(ctx, key, ttl, oc)
}

// DoMulti is [Client.Do] for a lock on several keys, all or none: it is
// [Client.ObtainMulti] followed by [Lock.Do]. keys and the lock are as for
// ObtainMulti; fn, its context, the renewals, the options and the error
// returned as for Do.
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context) error, opts ...ObtainOption) error {
	key, set, ttl, err := c.checkSet(ctx, keys, ttl)
	if err != nil {
		return c.closedObtain(err)
	}
	return c.doOn(ctx, key, set, forSet, ttl, fn, opts)
}

// Keys returns the keys the lock holds, without the client's prefix: the
// set given to [Client.ObtainMulti] (each key once, in the order first
// given), or [Lock.Key] alone. The slice is the caller's.
func (l *Lock) Keys() []string {
	if l.set != nil {
		return slices.Clone(l.set.names)
	}
	return []string{l.key}
}

// checkSet validates what ObtainMulti and DoMulti take, and returns the
// set's first key and the set, its duplicates dropped (nil for a set of one
// key, which is a lock on that key: a plain SET NX costs a master less than
// a script), and ttl rounded up as [Client.check] does.
func (c *Client) checkSet(ctx context.Context, keys []string, ttl time.Duration) (string, *keySet, time.Duration, error) {
	if len(keys) == 0 {
		return "", nil, 0, invalid("no keys: a lock on several keys needs at least one")
	}
	names := make([]string, 0, min(len(keys), MaxKeys))
	for i, k := range keys {
		if slices.Contains(names, k) {
			continue
		}
		if len(names) == MaxKeys {
			return "", nil, 0, invalid("more than %d distinct keys: a master runs a set's every request as one script, blocking others meanwhile", MaxKeys)
		}
		if err := c.checkKey(k); err != nil {
			return "", nil, 0, fmt.Errorf("%w (keys[%d])", err, i)
		}
		names = append(names, k)
	}
	ttl, err := c.check(ctx, names[0], ttl)
	if err != nil {
		return "", nil, 0, err
	}
	if len(names) == 1 {
		return names[0], nil, ttl, nil
	}
	if c.sharded {
		first := wire.HashSlot(c.cfg.keyPrefix + names[0])
		for _, k := range names[1:] {
			if slot := wire.HashSlot(c.cfg.keyPrefix + k); slot != first {
				return "", nil, 0, invalid("on a Redis Cluster the keys of a set must share one hash slot, and %q and %q (prefix %q included) do not (slots %d and %d): each master takes the set in one script, which a Cluster runs on one slot only; give the keys a common hash tag, the part in braces that Cluster hashes: {account}:a and {account}:b share a slot, account:a and account:b need not",
					names[0], k, c.cfg.keyPrefix, first, slot)
			}
		}
	}
	return names[0], c.newKeySet(names), ttl, nil
}
