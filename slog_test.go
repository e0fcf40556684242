package redlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestSlogLostLockNamesItsReasonAndMastersAndNoSecret: a Do whose lock
// another owner takes, on masters that require a password, logged as JSON
// at Debug. The lost-lock record has the reason (refused) and the masters
// and their answers as attributes of their own; no record anywhere holds
// the lock's token or the password.
func TestSlogLostLockNamesItsReasonAndMastersAndNoSecret(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw-for-slog"
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	var addrs []string
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		admin := s.Client()
		err := admin.ConfigSet(ctx, "requirepass", password).Err()
		admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		rdb := s.Client(func(o *redis.Options) { o.Password, o.ContextTimeoutEnabled = password, true })
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i], addrs = rdb, append(addrs, s.Addr())
	}
	var out lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := redlock.New(clients, redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithObserver(redlock.SlogObserver(logger)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var token string
	err = c.Do(ctx, "job", time.Second, func(ctx context.Context) error {
		// Do runs fn once a quorum granted the lock: the third master's
		// SET may still be on its way, so read the token where it is.
		var v string
		var err error
		for _, rdb := range clients {
			if v, err = rdb.Get(ctx, "job").Result(); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
		token, _, _ = strings.Cut(v, "!")
		for _, rdb := range clients {
			rdb.Set(ctx, "job", "intruder", time.Minute)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}, redlock.WithRenewEvery(50*time.Millisecond))
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	c.Close()

	log := out.String()
	if token == "" {
		t.Fatal("the lock's token was not read")
	}
	if strings.Contains(log, token) || strings.Contains(log, password) {
		t.Errorf("the log holds the token %q or the password:\n%s", token, log)
	}
	var lost *struct {
		Key, Reason, Cause string
		Masters, Answers   []string
	}
	for line := range strings.Lines(log) {
		var r struct {
			Msg, Level, Key, Reason, Cause string
			Masters, Answers               []string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.Msg == "redlock: lock lost" {
			if r.Level != "WARN" {
				t.Errorf("lost-lock record at %s, want WARN", r.Level)
			}
			lost = &struct {
				Key, Reason, Cause string
				Masters, Answers   []string
			}{r.Key, r.Reason, r.Cause, r.Masters, r.Answers}
		}
	}
	if lost == nil {
		t.Fatalf("no lost-lock record:\n%s", log)
	}
	if lost.Key != "job" || lost.Reason != string(redlock.Refused) {
		t.Errorf("lost-lock record: key %q, reason %q; want job, refused", lost.Key, lost.Reason)
	}
	if !slices.Equal(lost.Masters, addrs) || len(lost.Answers) != len(addrs) {
		t.Errorf("lost-lock record: masters %q, answers %q; want each of %q with its answer", lost.Masters, lost.Answers, addrs)
	}
	refused := 0
	for _, a := range lost.Answers {
		if a == "held by another owner" {
			refused++
		}
	}
	if refused < 2 {
		t.Errorf("lost-lock record's answers %q, want a quorum held by another owner", lost.Answers)
	}
}

// lockedBuffer is a bytes.Buffer for a handler that many goroutines use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSlogTellsABacklogAndItsEnd: a backlog of renewals is a Warn record
// with how many were due and how late; its end an Info record.
func TestSlogTellsABacklogAndItsEnd(t *testing.T) {
	h := &capture{}
	o := redlock.SlogObserver(slog.New(h))
	o.Observe(context.Background(), &redlock.BacklogEvent{Behind: true, Due: 120, Late: 150 * time.Millisecond})
	o.Observe(context.Background(), &redlock.BacklogEvent{})
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.records) != 2 {
		t.Fatalf("%d records, want 2", len(h.records))
	}
	behind, caught := h.records[0], h.records[1]
	attrs := map[string]string{}
	behind.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if behind.Level != slog.LevelWarn || behind.Message != "redlock: renewals behind" || attrs["due"] != "120" || attrs["late"] != "150ms" {
		t.Errorf("behind: %v %q %v", behind.Level, behind.Message, attrs)
	}
	if caught.Level != slog.LevelInfo || caught.Message != "redlock: renewals caught up" {
		t.Errorf("caught up: %v %q", caught.Level, caught.Message)
	}
}
