package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

const statusSynopsis = `Usage: redlock status --masters ADDR[,ADDR...] --key KEY [flags]

Shows, per master, whether the lock key (with --prefix) is held, by which
token, its TTL left and its fence counter, each master's values read at one
instant, then whether one token holds a quorum. Exits 0 when every master
answered, 125 when one did not.

Output, one line per master, tab-separated:
  ADDR  held  token=TOKEN  ttl=DURATION  [fence=N]  [holder="INFO"]
  ADDR  free  [fence=N]
  ADDR  error  MESSAGE
then one summary line:
  locked: token=TOKEN on M of N masters (quorum Q) [holder="INFO"]
  not locked: ...
fence=N appears when the key has a fence counter (locks taken with
--fencing); holder="INFO" when the token carries holder info (what
'redlock run' puts there: host, pid, command; --holder-info), unescaped
and quoted with Go's escapes. A TOKEN that is not printable ASCII without
spaces, quotes or backslashes (a token with holder info has spaces) is
shown quoted, with Go's escapes ("\x1b[2J\tfoo"); control characters in a
MESSAGE are escaped the same way.`

// statusTimeout bounds the status requests to one master when
// --node-timeout is not given.
const statusTimeout = 2 * time.Second

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
	masters := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		c := redis.NewClient(o)
		defer c.Close()
		masters[i] = c
	}
	lc, err := redlock.New(masters, redlock.WithKeyPrefix(cf.prefix), redlock.WithNodeTimeout(timeout))
	if err != nil {
		return usageFail(stderr, "status", err)
	}
	defer lc.Close()
	state, err := lc.Inspect(context.Background(), *key)
	if err != nil {
		return usageFail(stderr, "status", err)
	}

	code := 0
	for _, m := range state.Masters {
		fence := ""
		if m.Fence > 0 {
			fence = fmt.Sprintf("\tfence=%d", m.Fence)
		}
		switch {
		case m.Err != nil:
			fmt.Fprintf(stdout, "%s\terror\t%s\n", m.Addr, escapeControl(errText(m.Err)))
			code = exitFailure
		case !m.Held:
			fmt.Fprintf(stdout, "%s\tfree%s\n", m.Addr, fence)
		default:
			ttl := "none"
			if m.TTL >= 0 {
				ttl = m.TTL.String()
			}
			fmt.Fprintf(stdout, "%s\theld\ttoken=%s\tttl=%s%s%s\n", m.Addr, quoteToken(m.Token), ttl, fence, holderField("\t", m.HolderInfo))
		}
	}
	token, n := state.Holder()
	switch {
	case n >= state.Quorum:
		info := ""
		for _, m := range state.Masters {
			if m.Held && m.Token == token {
				info = m.HolderInfo
				break
			}
		}
		fmt.Fprintf(stdout, "locked: token=%s on %d of %d masters (quorum %d)%s\n", quoteToken(token), n, len(state.Masters), state.Quorum, holderField(" ", info))
	case n == 0 && code == 0:
		fmt.Fprintf(stdout, "not locked: free on every master\n")
	default:
		fmt.Fprintf(stdout, "not locked: no token on a quorum (%d of %d masters needed)\n", state.Quorum, len(state.Masters))
	}
	if code != 0 {
		fmt.Fprintf(stderr, "redlock status: a master did not answer\n")
	}
	return code
}

// holderField is the holder="INFO" field of a token's holder info, after
// sep; "" for none. The info is quoted with Go's escapes (strconv.Quote):
// a stored value cannot forge fields or lines, or drive the terminal, and
// printable UTF-8 stays readable.
func holderField(sep, info string) string {
	if info == "" {
		return ""
	}
	return sep + "holder=" + strconv.Quote(info)
}
