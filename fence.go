package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The resource side of fencing. A fence only protects what checks it: the
// resource must refuse a write whose fence is lower than one it has already
// accepted, so a holder that paused past its lease (and whose lock was
// granted to someone else meanwhile) cannot overwrite the newer holder's
// work. FencedWrite does that for a resource kept in Redis; for SQL, see the
// README (a conditional UPDATE ... WHERE fence <= $1).

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
	keys, args := []string{key}, []any{fence, value}
	res, err := rdb.EvalSha(ctx, fencedWriteScript.sha, keys, args...).Int64Slice()
	if noScript(err) {
		res, err = rdb.Eval(ctx, fencedWriteScript.src, keys, args...).Int64Slice()
	}
	if err != nil {
		return fmt.Errorf("redlock: fenced write to %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redlock: fenced write to %q: unexpected reply %v", key, res)
	}
	if res[0] == 0 {
		return &StaleFenceError{Key: key, Fence: fence, Highest: res[1]}
	}
	return nil
}

// FencedRead returns the value and the fence of the last write
// [FencedWrite] accepted for key; redis.Nil when there was none.
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
	fence, err = strconv.ParseInt(f, 10, 64)
	return v, fence, err
}
