package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Holder info (WithHolderInfo): who holds a lock, carried in its token.

// inspected waits until every master holds key for token, and returns
// what Inspect read then (Obtain returns at a quorum: the last master's
// request may still be on its way).
func inspected(t *testing.T, c *redlock.Client, key, token string) *redlock.KeyState {
	t.Helper()
	var st *redlock.KeyState
	redistest.Eventually(t, func() error {
		var err error
		if st, err = c.Inspect(context.Background(), key); err != nil {
			return err
		}
		for i, m := range st.Masters {
			if !m.Held || m.Token != token {
				return fmt.Errorf("master %d: %+v, want token %q", i, m, token)
			}
		}
		return nil
	})
	return st
}

// holderInfoOn fails t unless every master of st holds info as its
// holder info, and Holder names token on all of them.
func holderInfoOn(t *testing.T, st *redlock.KeyState, token, info string) {
	t.Helper()
	for i, m := range st.Masters {
		if m.HolderInfo != info {
			t.Errorf("master %d: HolderInfo %q, want %q", i, m.HolderInfo, info)
		}
	}
	if tok, n := st.Holder(); tok != token || n != len(st.Masters) {
		t.Errorf("Holder() = %q on %d, want the whole token %q on %d", tok, n, token, len(st.Masters))
	}
}

// TestHolderInfoShowsOnEveryMaster: at N=1 and N=3, a lock obtained
// WithHolderInfo has a token of the random part, "~" and the info, which
// Inspect shows unescaped on every master, Holder returns whole, and
// Lock.HolderInfo returns; Extend and Release work on it. Without the
// option the token is the random part alone, 22 characters without '~'.
func TestHolderInfoShowsOnEveryMaster(t *testing.T) {
	t.Parallel()
	const info = "host=a pid=1 cmd=backup"
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, clients, c := cluster(t, n, redlock.WithKeyPrefix("p:"))
			l := obtain(t, c, "k", time.Minute, redlock.WithHolderInfo(info))
			if tok := l.Token(); len(tok) != 22+1+len(info) || tok[22:] != "~"+info {
				t.Fatalf("token %q, want 22 random characters, \"~\" and %q", tok, info)
			}
			if got := l.HolderInfo(); got != info {
				t.Errorf("Lock.HolderInfo() = %q, want %q", got, info)
			}
			holderInfoOn(t, inspected(t, c, "k", l.Token()), l.Token(), info)
			for i, rdb := range clients {
				if v := get(t, rdb, "p:k"); v != l.Token() {
					t.Errorf("master %d: GET = %q, want the token %q", i, v, l.Token())
				}
			}
			if err := l.Extend(ctx, 2*time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			freed(t, 5*time.Second, clients, "p:k", l.Token())

			plain := obtain(t, c, "k", time.Minute)
			if tok := plain.Token(); len(tok) != 22 || strings.Contains(tok, "~") || plain.HolderInfo() != "" {
				t.Errorf("without WithHolderInfo: token %q, info %q; want 22 characters without '~', no info", tok, plain.HolderInfo())
			}
			holderInfoOn(t, inspected(t, c, "k", plain.Token()), plain.Token(), "")
			if err := plain.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			empty := obtain(t, c, "k", time.Minute, redlock.WithHolderInfo(""))
			if tok := empty.Token(); len(tok) != 22 || strings.Contains(tok, "~") {
				t.Errorf("WithHolderInfo(\"\"): token %q, want the random part alone", tok)
			}
			if err := empty.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}

// TestHolderInfoWithTheWaitMarkRoundTrips: info that holds the wait mark
// "!", the separator '~', '%', newlines, a NUL and UTF-8 reads back as it
// was, from the Lock and from Inspect, while the token holds no '!': the
// scripts still tell the token from a waiter's mark, so a key a waiter
// marked is still the lock's (Extend), Inspect shows the info past the
// mark, and the Release deletes it and wakes the waiter.
func TestHolderInfoWithTheWaitMarkRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	for i, info := range []string{
		"done!",
		"!~%!",
		"50% ~ %21 %zz",
		"line one\nline two\r\n\x00\x1b[2J",
		"crème brûlée, 東京, 🔒",
		"bad\xffutf8",
		strings.Repeat("!", 256), // the longest, escaped to three times its size
	} {
		key := fmt.Sprint("rt", i)
		l := obtain(t, c, key, time.Minute, redlock.WithHolderInfo(info))
		if strings.Contains(l.Token(), "!") || strings.Count(l.Token(), "~") != 1 {
			t.Errorf("info %q: token %q holds '!', or not exactly one '~'", info, l.Token())
		}
		if got := l.HolderInfo(); got != info {
			t.Errorf("Lock.HolderInfo() = %q, want %q", got, info)
		}
		holderInfoOn(t, inspected(t, c, key, l.Token()), l.Token(), info)
		onEvery(t, clients, key, l.Token())

		// Marked as waited for on every master: still ours, info intact.
		waiter := newClient(t, clients)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- waiter.WaitReleased(wctx, key) }()
		for _, rdb := range clients {
			marked(t, rdb, key)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("info %q: Extend of a marked key: %v", info, err)
		}
		st, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		holderInfoOn(t, st, l.Token(), info)
		if err := l.Release(ctx); err != nil {
			t.Errorf("info %q: Release of a marked key: %v", info, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("info %q: WaitReleased: %v", info, err)
			}
		case <-time.After(30 * time.Second): // the lock's TTL is a minute: woken by the release
			t.Errorf("info %q: WaitReleased not woken by the release", info)
		}
		cancel()
		redistest.Within(t, 5*time.Second, func() error { // Release returns at a quorum: the last master's delete may still be on its way
			if vs := holdersOf(t, clients, key); count(vs, "") != len(clients) {
				return fmt.Errorf("info %q: after Release the masters hold %q", info, vs)
			}
			return nil
		})
	}
}

// TestTooLongHolderInfoIsRefused: more than 256 bytes of info is refused
// before any request, with an error that names the limit and the length.
func TestTooLongHolderInfoIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 1)
	info := strings.Repeat("é", 128) + "x" // 257 bytes
	_, err := c.Obtain(ctx, "k", time.Minute, redlock.WithHolderInfo(info))
	if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "redlock: ") || !strings.Contains(err.Error(), "257 bytes") || !strings.Contains(err.Error(), "256") {
		t.Errorf("Obtain with %d bytes of info: %v; want ErrInvalidArgument naming 257 bytes and the limit 256", len(info), err)
	}
	err = c.Do(ctx, "k", time.Minute, func(context.Context) error { return nil }, redlock.WithHolderInfo(info))
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("Do with %d bytes of info: %v; want ErrInvalidArgument", len(info), err)
	}
	if v := get(t, clients[0], "k"); v != "" {
		t.Errorf("a refused Obtain left %q on the master", v)
	}
	// A lock's own handle has its token already.
	l := obtain(t, c, "k", time.Minute)
	defer l.Release(ctx)
	if _, _, err := l.KeepAlive(ctx, redlock.WithHolderInfo("x")); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("KeepAlive WithHolderInfo: %v; want ErrInvalidArgument", err)
	}
	if err := l.Do(ctx, func(context.Context) error { return nil }, redlock.WithHolderInfo("x")); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("Lock.Do WithHolderInfo: %v; want ErrInvalidArgument", err)
	}
}

// TestDoWithHolderInfoIsRenewed: Client.Do WithHolderInfo holds the lock
// under the info past several TTLs (its watchdog renews the token that
// carries it) and releases it; so does KeepAlive of a lock obtained with
// it; DoMulti shows the info on every key of its set.
func TestDoWithHolderInfoIsRenewed(t *testing.T) {
	t.Parallel()
	const info = "job=nightly host=b"
	const ttl = time.Second
	_, clients, c := cluster(t, 3)
	// heldWith waits until every master holds key with info, and returns
	// the token.
	heldWith := func(t *testing.T, key string) string {
		t.Helper()
		var token string
		redistest.Eventually(t, func() error {
			st, err := c.Inspect(context.Background(), key)
			if err != nil {
				return err
			}
			for i, m := range st.Masters {
				if !m.Held || m.HolderInfo != info {
					return fmt.Errorf("%s on master %d: %+v, want info %q", key, i, m, info)
				}
			}
			tok, n := st.Holder()
			if n != len(clients) {
				return fmt.Errorf("%s: Holder %q on %d masters, want %d", key, tok, n, len(clients))
			}
			token = tok
			return nil
		})
		return token
	}
	// renewed checks, 2.5 TTLs after the lock was seen, that work is still
	// on and every master still holds key for token.
	renewed := func(work context.Context, key, token string) error {
		time.Sleep(ttl * 5 / 2)
		if work.Err() != nil {
			return fmt.Errorf("the work's context ended: %w", context.Cause(work))
		}
		st, err := c.Inspect(context.Background(), key)
		if err != nil {
			return err
		}
		if tok, n := st.Holder(); tok != token || n != len(clients) {
			return fmt.Errorf("%s: Holder %q on %d after 2.5 TTLs, want %q on %d", key, tok, n, token, len(clients))
		}
		return nil
	}
	t.Run("Do", func(t *testing.T) {
		t.Parallel()
		var token string
		err := c.Do(context.Background(), "do", ttl, func(work context.Context) error {
			token = heldWith(t, "do")
			return renewed(work, "do", token)
		}, redlock.WithHolderInfo(info))
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		freed(t, 5*time.Second, clients, "do", token)
	})
	t.Run("KeepAlive", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		l := obtain(t, c, "keep", ttl, redlock.WithHolderInfo(info))
		work, stop, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		heldWith(t, "keep")
		err = renewed(work, "keep", l.Token())
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		freed(t, 5*time.Second, clients, "keep", l.Token())
	})
	t.Run("DoMulti", func(t *testing.T) {
		t.Parallel()
		keys := []string{"{set}a", "{set}b"}
		var token string
		err := c.DoMulti(context.Background(), keys, ttl, func(context.Context) error {
			for _, k := range keys {
				tok := heldWith(t, k)
				if token != "" && tok != token {
					return fmt.Errorf("%s held by %q, the set's first key by %q", k, tok, token)
				}
				token = tok
			}
			return nil
		}, redlock.WithHolderInfo(info))
		if err != nil {
			t.Fatalf("DoMulti: %v", err)
		}
		for _, k := range keys {
			freed(t, 5*time.Second, clients, k, token)
		}
	})
}

// TestWaiterWithHolderInfoObtainsAfterTheRelease: a WithWait Obtain with
// info, waiting behind a holder with other info, is woken by the release
// and obtains under a token that carries its own info.
func TestWaiterWithHolderInfoObtainsAfterTheRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients)
	const heldInfo, waitInfo = "holder!", "waiter~1 %"
	held := obtain(t, a, "k", time.Minute, redlock.WithHolderInfo(heldInfo))
	onEvery(t, clients, "k", held.Token())
	type got struct {
		l   *redlock.Lock
		err error
	}
	ch := make(chan got, 1)
	go func() {
		l, err := b.Obtain(ctx, "k", time.Minute, redlock.WithWait(), redlock.WithHolderInfo(waitInfo))
		ch <- got{l, err}
	}()
	for _, rdb := range clients {
		marked(t, rdb, "k")
	}
	holderInfoOn(t, inspected(t, a, "k", held.Token()), held.Token(), heldInfo)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	var w got
	select {
	case w = <-ch:
	case <-time.After(30 * time.Second): // the holder's TTL is a minute: woken by the release
		t.Fatal("the waiter did not obtain after the release")
	}
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	defer w.l.Release(ctx)
	if w.l.HolderInfo() != waitInfo || !strings.HasSuffix(w.l.Token(), "~waiter%7E1 %25") {
		t.Errorf("waiter's lock: token %q, info %q; want info %q", w.l.Token(), w.l.HolderInfo(), waitInfo)
	}
	// The waiter's Obtain returns at a quorum, maybe with a master where the
	// holder's Release came after the waiter's ask: that master holds no key.
	redistest.Eventually(t, func() error {
		st, err := b.Inspect(ctx, "k")
		if err != nil {
			return err
		}
		if tok, n := st.Holder(); tok != w.l.Token() {
			return fmt.Errorf("Holder() = %q on %d masters, want the waiter's %q on a quorum", tok, n, w.l.Token())
		}
		for i, m := range st.Masters {
			if m.Token == w.l.Token() && m.HolderInfo != waitInfo {
				return fmt.Errorf("master %d: HolderInfo %q, want %q", i, m.HolderInfo, waitInfo)
			}
		}
		return nil
	})
}

// TestAttachTakesATokenWithHolderInfo: Attach takes the whole token of a
// lock obtained with info (from Lock.Token or KeyState.Holder); the handle
// has the info, extends the lock, and its Release deletes the key on every
// master.
func TestAttachTakesATokenWithHolderInfo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	const info = "host=a pid=7 cmd=migrate ~!%"
	l := obtain(t, c, "job", time.Minute, redlock.WithHolderInfo(info))
	st := inspected(t, c, "job", l.Token())
	token, _ := st.Holder()
	other := newClient(t, clients) // another process
	a, err := other.Attach(ctx, "job", token, 2*time.Minute, 0)
	if err != nil {
		t.Fatalf("Attach with the whole token %q: %v", token, err)
	}
	if a.Token() != l.Token() || a.HolderInfo() != info {
		t.Errorf("attached: token %q, info %q; want %q, %q", a.Token(), a.HolderInfo(), l.Token(), info)
	}
	if err := a.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatalf("Extend of the attached handle: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of the attached handle: %v", err)
	}
	freed(t, 5*time.Second, clients, "job", l.Token())
	// The random part alone is another token: not the lock's.
	l = obtain(t, c, "job", time.Minute, redlock.WithHolderInfo(info))
	defer l.Release(ctx)
	inspected(t, c, "job", l.Token())
	if _, err := other.Attach(ctx, "job", l.Token()[:22], time.Minute, 0); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Attach with the random part alone: %v, want ErrLockLost", err)
	}
}
