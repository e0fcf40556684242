package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/internal/wire"
)

// A KeyState is what every master holds for one lock key, read by
// [Client.Inspect].
type KeyState struct {
	Key     string // as the caller named it, without the client's prefix
	Quorum  int
	Masters []MasterState // in the order of the masters given to New
}

// A MasterState is one master's view of a lock key.
type MasterState struct {
	Addr string // the master's address as its client knows it
	Held bool   // the key exists
	// Token is the key's value, the holder's token, without a waiter's
	// mark "!" and what follows it: the random part, then, for a lock
	// obtained [WithHolderInfo], "~" and the escaped info. [Client.Attach]
	// takes it whole.
	Token string
	// HolderInfo is the info the token carries, unescaped (what follows its
	// first "~"); "" without.
	HolderInfo string
	TTL        time.Duration // time left before the key expires; -1 when it has no expiry
	Fence      int64         // the key's fence counter; 0 when it has none (no fencing)
	Err        error         // the master did not answer; the fields above are then zero

	index int // the master's position, while Inspect collects
}

// Holder returns the token held on a quorum of masters (whole: with the
// holder info it carries, see [MasterState.Token]), and how many hold
// it; when no token holds a quorum, "" and the largest count (a count below
// the quorum says so; a key whose value is "" is held by "" too). A token on a
// quorum is the lock's owner as far as the masters know, for the least TTL
// among them (the owner's own [Lock.Validity] is shorter: it allows for
// clock drift).
func (s *KeyState) Holder() (token string, masters int) {
	counts := map[string]int{}
	for _, m := range s.Masters {
		if m.Held {
			counts[m.Token]++
		}
	}
	for t, n := range counts {
		if n > masters || (n == masters && t < token) {
			token, masters = t, n
		}
	}
	if masters < s.Quorum {
		return "", masters
	}
	return token, masters
}

// Inspect reads, on every master at once, who holds key, for how long, and
// its fence counter, each master's three values at one instant. It changes
// nothing, and answers for any key whoever holds it. The error is non-nil
// only for invalid input or a closed Client; a master that does not answer
// within the node timeout ([WithNodeTimeout], else 500ms) or ctx has its
// Err set.
func (c *Client) Inspect(ctx context.Context, key string) (*KeyState, error) {
	if _, err := c.check(ctx, key, time.Hour); err != nil {
		return nil, err
	}
	full := c.cfg.keyPrefix + key
	keys := []string{full, counterKey(full)}
	if !hasTag(full) && strings.IndexByte(full, '}') >= 0 {
		// No counter shares the key's Cluster slot: fencing refuses such a
		// key, so there is none to read.
		keys = keys[:1]
	}
	s := &KeyState{Key: key, Quorum: c.quorum, Masters: make([]MasterState, len(c.nodes))}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout(time.Hour))
	defer cancel()
	// The reads go straight to the masters' clients; a client whose reads
	// its context does not bound (ContextTimeoutEnabled off) would hold a
	// frozen master's read for its ReadTimeout. They run on the Client's
	// goroutines, which Close waits for, and Inspect returns at the
	// deadline whatever they do.
	if !c.enter() {
		return nil, ErrClosed
	}
	answers := make(chan MasterState, len(c.nodes))
	var left atomic.Int32
	left.Store(int32(len(c.nodes)))
	for i, n := range c.nodes {
		go func() {
			m := inspect(ctx, n.Redis(), keys)
			m.Addr, m.index = n.addr, i
			answers <- m
			if left.Add(-1) == 0 {
				c.dos.Done()
			}
		}()
	}
	for i, n := range c.nodes {
		s.Masters[i] = MasterState{Addr: n.addr, Err: fmt.Errorf("%w (%w)", errNoReply, context.DeadlineExceeded), index: -1}
	}
	for range c.nodes {
		select {
		case m := <-answers:
			s.Masters[m.index] = m
		case <-ctx.Done():
			for i := range s.Masters {
				if s.Masters[i].index < 0 {
					s.Masters[i].Err = fmt.Errorf("%w (%w)", errNoReply, context.Cause(ctx))
				}
			}
			return s, nil
		}
	}
	return s, nil
}

func inspect(ctx context.Context, rdb redis.UniversalClient, keys []string) MasterState {
	vs, err := rdb.EvalSha(ctx, scripts.Inspect.SHA, keys).Slice()
	if wire.NoScript(err) {
		vs, err = rdb.Eval(ctx, scripts.Inspect.Src, keys).Slice()
	}
	if err == nil && len(vs) != 3 {
		err = fmt.Errorf("redlock: unexpected reply %v", vs)
	}
	if err != nil {
		return MasterState{Err: err}
	}
	token, _ := vs[0].(string)
	pttl, _ := vs[1].(int64)
	counter, _ := vs[2].(string)
	m := MasterState{Held: pttl != -2, Token: token, HolderInfo: holderInfo(token)}
	switch {
	case pttl >= 0:
		m.TTL = time.Duration(pttl) * time.Millisecond
	case pttl == -1:
		m.TTL = -1
	}
	if counter != "" {
		if m.Fence, err = parseFence(counter); err != nil {
			return MasterState{Err: err}
		}
	}
	return m
}
