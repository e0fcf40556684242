package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	masters := servers[0].Addr() + "," + servers[1].Addr() + "," + servers[2].Addr()
	lc, err := redlock.New(clients, redlock.WithKeyPrefix("p:"))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	lock, err := lc.Obtain(ctxT(t), "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctxT(t))
	redistest.Eventually(t, func() error { // Obtain returns at quorum; the third master follows
		for i, c := range clients {
			if v, _ := c.Get(ctxT(t), "p:held").Result(); v != lock.Token() {
				return fmt.Errorf("master %d holds %q, not the lock's token", i, v)
			}
		}
		return nil
	})

	code, out, stderr := runRedlock(t, nil, "status", "--masters", masters, "--prefix", "p:", "--key", "held")
	if code != 0 {
		t.Fatalf("status: exit %d; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("status printed %d lines, want 4:\n%s", len(lines), out)
	}
	for i, s := range servers {
		f := strings.Split(lines[i], "\t")
		if len(f) != 4 || f[0] != s.Addr() || f[1] != "held" || f[2] != "token="+lock.Token() || !strings.HasPrefix(f[3], "ttl=") {
			t.Errorf("line %d = %q, want %s, held, token=%s, ttl=...", i, lines[i], s.Addr(), lock.Token())
			continue
		}
		if ttl, err := time.ParseDuration(strings.TrimPrefix(f[3], "ttl=")); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("line %d: ttl %q, want a duration in (0, 1m]", i, f[3])
		}
	}
	if want := "locked: token=" + lock.Token() + " on 3 of 3 masters (quorum 2)"; lines[3] != want {
		t.Errorf("summary = %q, want %q", lines[3], want)
	}

	// Without the prefix, the key is another one: free.
	code, out, _ = runRedlock(t, nil, "status", "--masters", masters, "--key", "held")
	if code != 0 || strings.Count(out, "\tfree\n") != 3 || !strings.Contains(out, "not locked: free on every master") {
		t.Errorf("status without prefix: exit %d:\n%s", code, out)
	}

	// A dead master: reported, and the exit status says so.
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runRedlock(t, nil, "status", "--masters", masters, "--prefix", "p:", "--key", "held")
	if code != exitFailure {
		t.Errorf("status with a dead master: exit %d, want %d", code, exitFailure)
	}
	if !strings.Contains(out, servers[2].Addr()+"\terror\t") || !strings.Contains(out, "on 2 of 3 masters (quorum 2)") {
		t.Errorf("status with a dead master:\n%s", out)
	}
}

// A value that is not a plain token is shown quoted and escaped: it can
// neither add fields or lines to the tab-separated output nor reach the
// terminal as an escape sequence.
func TestStatusEscapesTheValue(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	masters := servers[0].Addr() + "," + servers[1].Addr() + "," + servers[2].Addr()
	const value = "\x1b[2J\tfoo\nbar"
	for i, c := range clients {
		if err := c.Set(ctxT(t), "forged", value, time.Minute).Err(); err != nil {
			t.Fatalf("master %d: %v", i, err)
		}
	}
	code, out, stderr := runRedlock(t, nil, "status", "--masters", masters, "--key", "forged")
	if code != 0 {
		t.Fatalf("status: exit %d; stderr:\n%s", code, stderr)
	}
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("the output holds a control character: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("status printed %d lines, want 4: %q", len(lines), out)
	}
	quoted := `"\x1b[2J\tfoo\nbar"`
	for i, s := range servers {
		f := strings.Split(lines[i], "\t")
		if len(f) != 4 || f[0] != s.Addr() || f[1] != "held" || f[2] != "token="+quoted {
			t.Errorf("line %d = %q, want %s, held, token=%s, ttl=...", i, lines[i], s.Addr(), quoted)
		}
	}
	if want := "locked: token=" + quoted + " on 3 of 3 masters (quorum 2)"; lines[3] != want {
		t.Errorf("summary = %q, want %q", lines[3], want)
	}
	// The quoted form reads back as the value.
	if got, err := strconv.Unquote(quoted); err != nil || got != value {
		t.Errorf("%s unquotes to %q, %v", quoted, got, err)
	}

	// An empty value is a held key too, shown as "".
	for _, c := range clients {
		if err := c.Set(ctxT(t), "empty", "", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ = runRedlock(t, nil, "status", "--masters", masters, "--key", "empty")
	if code != 0 || strings.Count(out, "\theld\ttoken=\"\"\t") != 3 || !strings.Contains(out, `locked: token="" on 3 of 3`) {
		t.Errorf("status of an empty value: exit %d:\n%s", code, out)
	}
}

// The fence counter of a key locked with fencing shows on every master,
// held or free.
func TestStatusShowsTheFence(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	masters := servers[0].Addr() + "," + servers[1].Addr() + "," + servers[2].Addr()
	lc, err := redlock.New(clients, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	for range 2 {
		lock, err := lc.Obtain(ctxT(t), "fenced", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := lc.Obtain(ctxT(t), "fenced", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { // Obtain returns at quorum; the third master follows
		_, out, _ := runRedlock(t, nil, "status", "--masters", masters, "--key", "fenced")
		if n := strings.Count(out, "\theld\ttoken="+lock.Token()+"\t"); n != 3 || strings.Count(out, "\tfence=3\n") != 3 {
			return fmt.Errorf("status of a fenced lock (fence %d):\n%s", lock.Fence(), out)
		}
		return nil
	})
	if err := lock.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { // Release returns at quorum; the third master follows
		code, out, _ := runRedlock(t, nil, "status", "--masters", masters, "--key", "fenced")
		if code != 0 || strings.Count(out, "\tfree\tfence=3\n") != 3 {
			return fmt.Errorf("status of a released fenced lock: exit %d:\n%s", code, out)
		}
		return nil
	})
}

// The holder info a lock's token carries shows, unescaped and quoted,
// at the end of every master's line and of the summary; the token itself
// stays whole, quoted when the info has spaces. Info that a stored value
// forged is quoted too: it can neither add fields or lines nor reach the
// terminal.
func TestStatusShowsTheHolderInfo(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	masters := servers[0].Addr() + "," + servers[1].Addr() + "," + servers[2].Addr()
	lc, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	const info = "host=a pid=1 cmd=backup é!"
	lock, err := lc.Obtain(ctxT(t), "held", time.Minute, redlock.WithHolderInfo(info))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctxT(t))
	token, holder := strconv.QuoteToASCII(lock.Token()), `holder="host=a pid=1 cmd=backup é!"`
	redistest.Eventually(t, func() error { // Obtain returns at quorum; the third master follows
		code, out, stderr := runRedlock(t, nil, "status", "--masters", masters, "--key", "held")
		if code != 0 {
			return fmt.Errorf("status: exit %d; stderr:\n%s", code, stderr)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 4 {
			return fmt.Errorf("status printed %d lines, want 4:\n%s", len(lines), out)
		}
		for i, s := range servers {
			f := strings.Split(lines[i], "\t")
			if len(f) != 5 || f[0] != s.Addr() || f[1] != "held" || f[2] != "token="+token || !strings.HasPrefix(f[3], "ttl=") || f[4] != holder {
				return fmt.Errorf("line %d = %q, want %s, held, token=%s, ttl=..., %s", i, lines[i], s.Addr(), token, holder)
			}
		}
		if want := "locked: token=" + token + " on 3 of 3 masters (quorum 2) " + holder; lines[3] != want {
			return fmt.Errorf("summary = %q, want %q", lines[3], want)
		}
		return nil
	})
	if got, err := strconv.Unquote(token); err != nil || got != lock.Token() {
		t.Errorf("the token field unquotes to %q, %v; want the whole token %q", got, err, lock.Token())
	}

	// Forged info: escaped in the key's value, a control sequence and
	// a line once unescaped.
	for _, c := range clients {
		if err := c.Set(ctxT(t), "forged", "x~%1B[2J%0Aevil%09", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := runRedlock(t, nil, "status", "--masters", masters, "--key", "forged")
	if code != 0 || strings.ContainsAny(out, "\x1b\r") || strings.Count(out, "\n") != 4 {
		t.Errorf("status of forged info: exit %d: %q", code, out)
	}
	if want := `holder="\x1b[2J\nevil\t"`; strings.Count(out, "\t"+want+"\n") != 3 || !strings.HasSuffix(out, " "+want+"\n") {
		t.Errorf("status of forged info: want %s on every line:\n%s", want, out)
	}
}
