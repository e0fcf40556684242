package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const statusSynopsis = `Usage: redlock status --masters ADDR[,ADDR...] --key KEY [flags]

Shows, per master, whether the lock key (with --prefix) is held, by which
token, and its TTL left (GET and PTTL), then whether one token holds a
quorum. Exits 0 when every master answered, 125 when one did not.

Output, one line per master, tab-separated:
  ADDR  held  token=TOKEN  ttl=DURATION
  ADDR  free
  ADDR  error  MESSAGE
then one summary line:
  locked: token=TOKEN on M of N masters (quorum Q)
  not locked: ...
A TOKEN that is not printable ASCII without spaces, quotes or backslashes
is shown quoted, with Go's escapes ("\x1b[2J\tfoo"); control characters
in a MESSAGE are escaped the same way.`

// statusTimeout bounds the status requests to one master when
// --node-timeout is not given.
const statusTimeout = 2 * time.Second

type masterStatus struct {
	held  bool
	token string
	ttl   time.Duration
	err   error
}

// statusCmd is `redlock status`.
func statusCmd(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf connFlags
	cf.register(fset)
	key := fset.String("key", "", "the lock's key (required)")
	if code, ok := parse(fset, args, statusSynopsis, stdout, stderr); !ok {
		return code
	}
	if fset.NArg() > 0 {
		return usageFail(stderr, "status", usagef("unexpected argument %q", fset.Arg(0)))
	}
	if *key == "" {
		return usageFail(stderr, "status", usagef("--key is required"))
	}
	opts, err := cf.options(getenv)
	if err != nil {
		return usageFail(stderr, "status", err)
	}
	timeout := statusTimeout
	if cf.nodeTimeout > 0 {
		timeout = cf.nodeTimeout
	}
	full := cf.prefix + *key
	sts := make([]masterStatus, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() {
			c := redis.NewClient(o)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			sts[i] = status(ctx, c, full)
		})
	}
	wg.Wait()

	code := 0
	tokens := map[string]int{}
	for i, st := range sts {
		addr := opts[i].Addr
		switch {
		case st.err != nil:
			fmt.Fprintf(stdout, "%s\terror\t%s\n", addr, escapeControl(st.err.Error()))
			code = exitFailure
		case !st.held:
			fmt.Fprintf(stdout, "%s\tfree\n", addr)
		default:
			ttl := "none"
			if st.ttl >= 0 {
				ttl = st.ttl.String()
			}
			fmt.Fprintf(stdout, "%s\theld\ttoken=%s\tttl=%s\n", addr, quoteToken(st.token), ttl)
			tokens[st.token]++
		}
	}
	quorum := len(opts)/2 + 1
	best, n := "", 0
	for t, c := range tokens {
		if c > n {
			best, n = t, c
		}
	}
	switch {
	case n >= quorum:
		fmt.Fprintf(stdout, "locked: token=%s on %d of %d masters (quorum %d)\n", quoteToken(best), n, len(opts), quorum)
	case n == 0 && code == 0:
		fmt.Fprintf(stdout, "not locked: free on every master\n")
	default:
		fmt.Fprintf(stdout, "not locked: no token on a quorum (%d of %d masters needed)\n", quorum, len(opts))
	}
	if code != 0 {
		fmt.Fprintf(stderr, "redlock status: a master did not answer\n")
	}
	return code
}

// status reads one master's view of key.
func status(ctx context.Context, c *redis.Client, key string) masterStatus {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return masterStatus{}
	}
	if err != nil {
		return masterStatus{err: err}
	}
	// PTTL answers -1 for a key without expiry; the lock always has one,
	// but a key set by hand may not.
	ttl := pttl.Val()
	if ttl < 0 {
		ttl = -1
	}
	return masterStatus{held: true, token: get.Val(), ttl: ttl}
}
