package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/internal/wire"
)

// The resource side of fencing. A fence only protects what checks it: the
// resource must refuse a write whose fence is lower than one it has already
// accepted, so a holder that paused past its lease (and whose lock was
// granted to someone else meanwhile) cannot overwrite the newer holder's
// work. FencedWrite does that for a resource kept in Redis; for SQL, see
// docs/fencing.md (a conditional UPDATE ... WHERE fence <= $1).

// ErrStaleFence matches a write refused because its fence is lower than
// the highest the resource has seen; the error is a [*StaleFenceError].
var ErrStaleFence = errors.New("redlock: stale fence")

// A StaleFenceError reports a write refused by [FencedWrite].
type StaleFenceError struct {
	Key     string // the resource
	Fence   int64  // the refused writer's fence
	Highest int64  // the highest fence the resource has accepted
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("redlock: stale fence: write to %q with fence %d refused, the resource has seen fence %d", e.Key, e.Fence, e.Highest)
}

// Is makes errors.Is(err, ErrStaleFence) hold.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// FencedWrite stores value in the resource key, a Redis hash with the fields
// "value" and "fence", only if fence is not lower than the highest fence the
// resource has accepted: equal is accepted, so one holder may write several
// times. The check and the write are one atomic script. A refused write
// returns a [*StaleFenceError] matching [ErrStaleFence]. key is the
// resource's own key (no prefix is added); fence comes from [Lock.Fence] and
// must be >= 1.
func FencedWrite(ctx context.Context, rdb redis.Scripter, key string, fence int64, value string) error {
	if ctx == nil || rdb == nil {
		return invalid("nil context or client")
	}
	if key == "" {
		return invalid("empty resource key")
	}
	if fence < 1 {
		return invalid("fence must be >= 1 (a lock obtained WithFencing), got %d", fence)
	}
	keys, args := []string{key}, []any{strconv.FormatInt(fence, 10), value}
	res, err := rdb.EvalSha(ctx, scripts.FencedWrite.SHA, keys, args...).Slice()
	if wire.NoScript(err) {
		res, err = rdb.Eval(ctx, scripts.FencedWrite.Src, keys, args...).Slice()
	}
	if err != nil {
		return fmt.Errorf("redlock: fenced write to %q: %w", key, err)
	}
	var ok int64
	var high string
	if len(res) == 2 {
		ok, _ = res[0].(int64)
		high, _ = res[1].(string)
	}
	highest, perr := parseFence(high)
	if perr != nil {
		return fmt.Errorf("redlock: fenced write to %q: unexpected reply %v", key, res)
	}
	if ok == 0 {
		return &StaleFenceError{Key: key, Fence: fence, Highest: highest}
	}
	return nil
}

// FencedRead returns the value and the fence of the last write
// [FencedWrite] accepted for key; redis.Nil when there was none, and an
// error when the stored fence is not a decimal int64.
func FencedRead(ctx context.Context, rdb redis.Cmdable, key string) (value string, fence int64, err error) {
	vs, err := rdb.HMGet(ctx, key, "value", "fence").Result()
	if err != nil {
		return "", 0, err
	}
	v, ok1 := vs[0].(string)
	f, ok2 := vs[1].(string)
	if !ok1 || !ok2 {
		return "", 0, redis.Nil
	}
	fence, err = parseFence(f)
	if err != nil {
		return "", 0, fmt.Errorf("redlock: the resource %q holds fence %q, which is not a decimal int64", key, f)
	}
	return v, fence, nil
}

// parseFence reads a stored fence: a decimal int64 >= 0 as FencedWrite
// writes it (no sign, no leading zeros).
func parseFence(s string) (int64, error) {
	f, err := strconv.ParseInt(s, 10, 64)
	if err != nil || f < 0 || strconv.FormatInt(f, 10) != s {
		return 0, fmt.Errorf("redlock: fence %q is not a decimal int64", s)
	}
	return f, nil
}

// raise makes the fence of a fenced acquire that reached quorum: the largest
// counter among the masters that acquired. It raises the lower counters to
// it; a master whose counter could not be raised no longer counts toward
// the quorum (rd.ok drops), so every master that counts carries at least
// the fence, and any later quorum, which shares a master with this one,
// draws a larger fence.
func (c *Client) raise(ctx context.Context, rd *round, l *Lock, timeout time.Duration) int64 {
	var fence int64
	for i := range rd.nodes {
		if rd.nodes[i].Err == nil {
			fence = max(fence, rd.vals[i])
		}
	}
	o := wire.Raise(l.target, fence)
	o.Deadline, o.Done = capDeadline(ctx, time.Now().Add(timeout)), ctx.Done()
	o.Inline = true // as fanoutGated's
	o.Vals = ctx
	raised := c.round()
	defer raised.done()
	n := 0
	for i := range c.nodes {
		if rd.nodes[i].Err == nil && rd.vals[i] < fence {
			c.send(i, &o, raised)
			n++
		}
	}
	c.collect(ctx, raised, n, o.Deadline, timeout, false)
	for i := range c.nodes {
		if rd.nodes[i].Err == nil && rd.vals[i] < fence && raised.nodes[i].Err != nil {
			err := raised.nodes[i].Err
			if err == ErrTaken {
				err = errors.New("the lock is no longer ours there")
			}
			rd.nodes[i].Err = fmt.Errorf("redlock: fence counter not raised to %d: %w", fence, unprefixed{err})
			rd.ok--
		}
	}
	return fence
}

// counterKey names the fence counter of a lock key, in the same Redis
// Cluster hash slot: a key with a hash tag keeps it ("{user:1}:job" ->
// "{user:1}:job:fence"), a key without one becomes the tag ("job" ->
// "{job}:fence"). A key with a '}' but no valid tag cannot be tagged that
// way; [Client.check] rejects it on a Cluster.
func counterKey(key string) string {
	if hasTag(key) || strings.IndexByte(key, '}') >= 0 {
		return key + ":fence"
	}
	return "{" + key + "}:fence"
}

// hasTag reports whether key has a Redis Cluster hash tag: a '{' followed
// later by a '}' with at least one byte between them.
func hasTag(key string) bool {
	i := strings.IndexByte(key, '{')
	return i >= 0 && strings.IndexByte(key[i+1:], '}') > 0
}
