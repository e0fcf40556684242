package chaos

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
)

// A Witness watches every master through MONITOR and keeps, for each lock
// token, when and in which order each master ran its acquires, extends,
// re-takes and releases. A master's MONITOR stream is in the order the
// master ran the commands, timestamped by the master's clock (on this
// machine, the same clock as time.Now's wall reading), so the witness can
// tell what the client cannot: whether a request ran after its lock was
// released, or after its lock's validity had ended.
//
// It knows the lock's scripts by what they do, from their source (SCRIPT
// LOAD, or EVAL; see learn). A script counts as run once the master shows
// its first command: an EVALSHA of a script the master has not been given
// fails with NOSCRIPT, and MONITOR shows it all the same. A lock token is
// the first argument after the keys. Every master must start empty with the
// witness watching. A monitor that the master closes (a restart, a
// Sentinel's CLIENT KILL TYPE normal at a failover) is opened again; what
// the master ran meanwhile is not seen (Reconnects counts them).
type Witness struct {
	prefix string
	addrs  []string
	wg     sync.WaitGroup

	mu         sync.Mutex
	cond       sync.Cond
	conns      []net.Conn
	closed     bool
	reconnects int
	scripts    map[string]string // sha1 -> kind
	cur        []witnessCmd      // per master: the last script called by a client, for the lua lines after it
	seq        []int64           // per master: lines seen
	tokens     map[string][]WitnessEvent
	keep       map[string]bool // tokens of holds, never pruned
	marks      []map[string]bool
	lines      int64
	err        error

	// repl are the addresses whose lines on a master's monitor are a
	// replication stream (a replica's link to its master): they are the
	// master's effects, not requests, and make no events.
	repl map[string]bool
	// states are, per master, the tracked keys' values over time, run
	// through the master's own commands (Track).
	states []map[string]*keyTrack
}

// WitnessEvent kinds.
const (
	EvAcquire = "acquire" // SET of the token: the acquire (top level, or in a fenced acquire)
	EvExtend  = "extend"  // an extend script called with the token (it ran, whatever it did)
	EvEffect  = "effect"  // the PEXPIRE an extend script made: the key was ours there
	EvRetake  = "retake"  // the SET an extend script made: the key was absent
	EvRelease = "release" // a release script called with the token (also one that keeps the key: WithHoldAtLeast)
	EvDelete  = "delete"  // the DEL a release script made
)

// A WitnessEvent is one master running one step for a token.
type WitnessEvent struct {
	Master int
	Seq    int64 // the line's position in the master's stream
	At     int64 // the master's clock, µs since the epoch
	Kind   string
	Key    string
}

// A witnessCmd is a script a client called, for the lua lines after it: its
// event is recorded at its first (pending until then: NOSCRIPT runs none).
type witnessCmd struct {
	kind, token, key string
	pending          bool
	at, seq          int64
	// join holds the keys and tokens of a batch of Extends in one call
	// (extend_batch.lua), in the order it runs them, each from its GET;
	// next is the one the next GET begins.
	join []joinedKey
	next int
}

// A joinedKey is one Extend of a batch of them in one call.
type joinedKey struct{ key, token string }

// evJoin is the kind of extend_batch.lua: the Extends of several keys.
const evJoin = "join"

// NewWitness starts MONITOR on each address; keys outside prefix are
// ignored. Close it when done.
func NewWitness(addrs []string, prefix string) (*Witness, error) {
	w := &Witness{prefix: prefix, addrs: addrs, scripts: map[string]string{}, tokens: map[string][]WitnessEvent{}, keep: map[string]bool{},
		cur: make([]witnessCmd, len(addrs)), seq: make([]int64, len(addrs)), repl: map[string]bool{}}
	for range addrs {
		w.states = append(w.states, map[string]*keyTrack{})
		w.marks = append(w.marks, map[string]bool{})
	}
	w.conns = make([]net.Conn, len(addrs))
	w.cond.L = &w.mu
	for i, a := range addrs {
		c, r, err := dialMonitor(a)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.conns[i] = c
		w.wg.Go(func() { w.read(i, r) })
	}
	return w, nil
}

// dialMonitor opens a connection to a and starts MONITOR on it.
func dialMonitor(a string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", a, time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReaderSize(c, 1<<16)
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		c.Close()
		return nil, nil, err
	}
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		c.Close()
		return nil, nil, fmt.Errorf("chaos: MONITOR on %s: %q %v", a, l, err)
	}
	c.SetDeadline(time.Time{})
	return c, r, nil
}

// Close stops watching and waits for the readers.
func (w *Witness) Close() {
	w.mu.Lock()
	w.closed = true
	for _, c := range w.conns {
		if c != nil {
			c.Close()
		}
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	w.wg.Wait()
}

// Err is the first read error other than the end of a stream Close caused.
func (w *Witness) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Lines is how many lines the witness has read.
func (w *Witness) Lines() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lines
}

// Reconnects is how many times a master closed a monitor, which the
// witness opened again.
func (w *Witness) Reconnects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reconnects
}

// monitorRetry bounds how long the witness tries to open a monitor again
// before it gives up with an error.
const monitorRetry = 15 * time.Second

func (w *Witness) read(m int, r *bufio.Reader) {
	for {
		l, err := r.ReadString('\n')
		if err == nil {
			w.line(m, strings.TrimRight(l, "\r\n"))
			continue
		}
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.reconnects++
		w.cur[m] = witnessCmd{}
		w.mu.Unlock()
		// The master closed it: open it again (a restart takes a while).
		start := time.Now()
		for {
			c, r2, derr := dialMonitor(w.addrs[m])
			w.mu.Lock()
			if w.closed {
				w.mu.Unlock()
				if c != nil {
					c.Close()
				}
				return
			}
			if derr == nil {
				w.conns[m] = c
				w.mu.Unlock()
				r = r2
				break
			}
			if time.Since(start) > monitorRetry {
				if w.err == nil {
					w.err = fmt.Errorf("chaos: witness of master %d: %w (again: %w)", m, err, derr)
				}
				w.cond.Broadcast()
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// line takes one MONITOR line of master m (a script's own commands follow
// the call, from "lua"):
// +1700000000.123456 [0 127.0.0.1:5000] "evalsha" "..." "1" "key" "token"
func (w *Witness) line(m int, l string) {
	at, src, args, ok := parseMonitor(l)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines++
	w.seq[m]++
	if !ok || len(args) == 0 {
		return
	}
	cmd := strings.ToLower(args[0])
	if m < len(w.states) {
		w.track(m, at, cmd, args)
	}
	if w.repl[src] {
		// A master's stream to this replica: effects, not requests; but a
		// script it loads is this replica's too.
		if cmd == "script" && len(args) == 3 && strings.EqualFold(args[1], "load") {
			w.learn(args[2])
		}
		return
	}
	if src != "lua" {
		w.cur[m] = witnessCmd{} // a script not confirmed by now did not run (NOSCRIPT)
	}
	evAt := func(kind, token, key string, at, seq int64) {
		w.tokens[token] = append(w.tokens[token], WitnessEvent{Master: m, Seq: seq, At: at, Kind: kind, Key: key})
	}
	ev := func(kind, token, key string) { evAt(kind, token, key, at, w.seq[m]) }
	// ours: a value that is the token, or the token and a waiter's mark
	// ("!" and the turn queue, which no token contains).
	ours := func(v, token string) bool { return v == token || strings.HasPrefix(v, token+"!") }
	switch {
	case src == "lua":
		c := w.cur[m]
		if c.join != nil && cmd == "get" && len(args) == 2 && c.next < len(c.join) {
			// The batch begins its next key's Extend: as one call of
			// extend.lua with that key's token.
			k := c.join[c.next]
			w.cur[m].next++
			w.cur[m].kind, w.cur[m].key, w.cur[m].token = "", k.key, k.token
			if strings.HasPrefix(k.key, w.prefix) {
				w.cur[m].kind = EvExtend
				evAt(EvExtend, k.token, k.key, c.at, c.seq)
			}
			c = w.cur[m]
		}
		if c.pending { // the script runs: its first command
			w.cur[m].pending = false
			evAt(c.kind, c.token, c.key, c.at, c.seq)
		}
		switch {
		case cmd == "set" && len(args) >= 3 && c.kind == EvExtend && ours(args[2], c.token):
			ev(EvRetake, c.token, args[1])
		case cmd == "pexpire" && len(args) >= 3 && c.kind == EvExtend:
			ev(EvEffect, c.token, args[1])
		case cmd == "set" && len(args) >= 3 && c.kind == EvAcquire && ours(args[2], c.token):
			ev(EvAcquire, c.token, args[1])
		case cmd == "del" && c.kind == EvRelease:
			ev(EvDelete, c.token, c.key)
		}
	case cmd == "echo" && len(args) == 2:
		w.marks[m][args[1]] = true
		w.cond.Broadcast()
	case cmd == "script" && len(args) == 3 && strings.EqualFold(args[1], "load"):
		w.learn(args[2])
	case cmd == "eval" || cmd == "evalsha":
		if len(args) < 3 {
			return
		}
		sha := strings.ToLower(args[1])
		if cmd == "eval" {
			sha = w.learn(args[1])
		}
		kind := w.scripts[sha]
		n, err := strconv.Atoi(args[2])
		if kind == evJoin && err == nil && n >= 1 && len(args) >= 3+5*n {
			// Each key's prefix is looked at as its Extend begins.
			var join []joinedKey
			for i := range n {
				join = append(join, joinedKey{key: args[3+i], token: args[3+n+4*i]})
			}
			w.cur[m] = witnessCmd{join: join, at: at, seq: w.seq[m]}
			return
		}
		if kind == "" || kind == evJoin || err != nil || n < 1 || len(args) < 3+n+1 || !strings.HasPrefix(args[3], w.prefix) {
			return
		}
		key, token := args[3], args[3+n]
		// A fenced acquire counts when its SET runs; the others at their
		// first command.
		w.cur[m] = witnessCmd{kind: kind, token: token, key: key, pending: kind != EvAcquire, at: at, seq: w.seq[m]}
	case cmd == "set" && len(args) >= 3 && strings.HasPrefix(args[1], w.prefix):
		token, _, _ := strings.Cut(args[2], "!") // a waiter's plain acquire carries its mark and queue
		ev(EvAcquire, token, args[1])
	}
}

// learn classifies a script by its source and returns its sha1: DEL makes
// a release; PEXPIRE with a SET (the re-take of a vanished key) an extend,
// without one a release that keeps the key for the rest of a minimum hold
// (WithHoldAtLeast); INCR or SET an acquire (a fenced one, one sent again,
// a waiter's, a set's; a fence raise too, whose SET is no lock key's).
func (w *Witness) learn(src string) string {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	s := strings.ToUpper(src)
	has := func(c string) bool { return strings.Contains(s, "'"+c+"'") || strings.Contains(s, `"`+c+`"`) }
	switch {
	case sha == scripts.ExtendBatch.SHA:
		w.scripts[sha] = evJoin
	case has("DEL"):
		w.scripts[sha] = EvRelease
	case has("PEXPIRE") && has("SET"):
		w.scripts[sha] = EvExtend
	case has("PEXPIRE"):
		w.scripts[sha] = EvRelease
	case has("INCR") || has("SET"):
		w.scripts[sha] = EvAcquire
	}
	return sha
}

// parseMonitor splits a MONITOR line into the master's time (µs), the
// source ("lua" for a script's commands) and the command's arguments.
func parseMonitor(l string) (at int64, src string, args []string, ok bool) {
	l, found := strings.CutPrefix(l, "+")
	if !found {
		return 0, "", nil, false
	}
	ts, rest, found := strings.Cut(l, " ")
	if !found {
		return 0, "", nil, false
	}
	sec, frac, _ := strings.Cut(ts, ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	if err1 != nil || err2 != nil || !strings.HasPrefix(rest, "[") {
		return 0, "", nil, false
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, "", nil, false
	}
	_, src, _ = strings.Cut(rest[1:end], " ")
	args, ok = unquoteArgs(rest[end+1:])
	return s*1e6 + us, src, args, ok
}

// unquoteArgs reads the arguments of a MONITOR line, each in double quotes
// with Redis's escapes (\" \\ \n \r \t \a \b \xHH).
func unquoteArgs(s string) ([]string, bool) {
	var args []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, false
		}
		var b strings.Builder
		i++
		for {
			if i >= len(s) {
				return nil, false
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				i++
				continue
			}
			if i+1 >= len(s) {
				return nil, false
			}
			switch e := s[i+1]; e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+3 >= len(s) {
					return nil, false
				}
				v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
				if err != nil {
					return nil, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(e)
			}
			i += 2
		}
		args = append(args, b.String())
	}
	return args, true
}

// Sync waits until every master's stream has caught up with now: it sends
// ECHO with a fresh mark through send (one client per master, unproxied)
// and waits to read it back from each monitor.
func (w *Witness) Sync(ctx context.Context, send func(ctx context.Context, master int, msg string) error) error {
	mark := fmt.Sprintf("witness-sync-%d", time.Now().UnixNano())
	for m := range w.conns {
		if err := send(ctx, m, mark); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for m := range w.conns {
		for !w.marks[m][mark] {
			if ctx.Err() != nil {
				return fmt.Errorf("chaos: witness of master %d did not catch up: %w", m, ctx.Err())
			}
			if w.err != nil {
				return w.err
			}
			w.cond.Wait()
		}
	}
	return nil
}

// Keep marks token as one the checks will ask about: Prune leaves it.
func (w *Witness) Keep(token string) {
	w.mu.Lock()
	w.keep[token] = true
	w.mu.Unlock()
}

// Prune drops the events of tokens nobody kept whose last event is older
// than age (failed attempts), so a long run's memory stays flat.
func (w *Witness) Prune(age time.Duration) {
	limit := time.Now().Add(-age).UnixMicro()
	w.mu.Lock()
	defer w.mu.Unlock()
	for t, evs := range w.tokens {
		if !w.keep[t] && evs[len(evs)-1].At < limit {
			delete(w.tokens, t)
		}
	}
}

// Events returns token's events, in each master's order.
func (w *Witness) Events(token string) []WitnessEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WitnessEvent(nil), w.tokens[token]...)
}

// Forget drops token's events once the checks are done with it.
func (w *Witness) Forget(token string) {
	w.mu.Lock()
	delete(w.tokens, token)
	delete(w.keep, token)
	w.mu.Unlock()
}

// Replicated names addresses whose lines on a monitor are a replication
// stream, not requests: the address a replica knows its master by (a proxy
// on its link, or the master itself). Their commands still move the
// tracked keys' states.
func (w *Witness) Replicated(addrs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range addrs {
		w.repl[a] = true
	}
}

// A keyTrack is one key's value on one master as its commands left it, and
// every change, in the master's order and by its clock.
type keyTrack struct {
	present bool
	value   string
	exp     int64 // µs since the epoch; 0: no expiry
	changes []KeyChange
}

// A KeyChange is a key's state from At on (until the next change, or its
// expiry Exp if sooner).
type KeyChange struct {
	At      int64 // the master's clock, µs since the epoch
	Present bool
	Value   string
	Exp     int64 // µs; 0: no expiry
}

// Track makes the witness follow keys (full names) on every master: their
// values and expiries as the master's own commands set them (SET with its
// options, DEL, PEXPIRE and the like, APPEND, FLUSHALL), whoever sends
// them, scripts' commands included. A key expires by the master's clock;
// on this machine that is time.Now's wall reading. Call it before the
// masters run anything on the keys.
func (w *Witness) Track(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.states {
		for _, k := range keys {
			if st[k] == nil {
				st[k] = &keyTrack{}
			}
		}
	}
}

// track applies one command of master m at at to the tracked keys; w.mu is
// held.
func (w *Witness) track(m int, at int64, cmd string, args []string) {
	st := w.states[m]
	if len(st) == 0 {
		return
	}
	key := func(i int) *keyTrack {
		if i >= len(args) {
			return nil
		}
		return st[args[i]]
	}
	switch cmd {
	case "flushall", "flushdb":
		for _, k := range st {
			k.apply(at, func() { k.present = false })
		}
	case "del", "unlink":
		for i := 1; i < len(args); i++ {
			if k := key(i); k != nil {
				k.apply(at, func() { k.present = false })
			}
		}
	case "getdel":
		if k := key(1); k != nil {
			k.apply(at, func() { k.present = false })
		}
	case "set":
		k := key(1)
		if k == nil || len(args) < 3 {
			return
		}
		k.apply(at, func() {
			exp, keep := int64(0), false
			nx, xx := false, false
			for i := 3; i < len(args); i++ {
				n := int64(0)
				if i+1 < len(args) {
					n, _ = strconv.ParseInt(args[i+1], 10, 64)
				}
				switch strings.ToLower(args[i]) {
				case "nx":
					nx = true
				case "xx":
					xx = true
				case "keepttl":
					keep = true
				case "px":
					exp, i = at+n*1000, i+1
				case "ex":
					exp, i = at+n*1_000_000, i+1
				case "pxat":
					exp, i = n*1000, i+1
				case "exat":
					exp, i = n*1_000_000, i+1
				}
			}
			if nx && k.present || xx && !k.present {
				return
			}
			if keep && k.present {
				exp = k.exp
			}
			k.present, k.value, k.exp = true, args[2], exp
		})
	case "append":
		k := key(1)
		if k == nil || len(args) < 3 {
			return
		}
		k.apply(at, func() {
			if !k.present {
				k.present, k.value, k.exp = true, "", 0
			}
			k.value += args[2]
		})
	case "persist":
		if k := key(1); k != nil {
			k.apply(at, func() { k.exp = 0 })
		}
	case "pexpire", "expire", "pexpireat", "expireat":
		k := key(1)
		if k == nil || len(args) < 3 {
			return
		}
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return
		}
		var exp int64
		switch cmd {
		case "pexpire":
			exp = at + n*1000
		case "expire":
			exp = at + n*1_000_000
		case "pexpireat":
			exp = n * 1000
		default:
			exp = n * 1_000_000
		}
		flag := ""
		if len(args) > 3 {
			flag = strings.ToLower(args[3])
		}
		k.apply(at, func() {
			if !k.present {
				return
			}
			switch flag {
			case "nx":
				if k.exp != 0 {
					return
				}
			case "xx":
				if k.exp == 0 {
					return
				}
			case "gt": // no expiry counts as infinite
				if k.exp == 0 || exp <= k.exp {
					return
				}
			case "lt":
				if k.exp != 0 && exp >= k.exp {
					return
				}
			}
			if exp <= at {
				k.present = false
				return
			}
			k.exp = exp
		})
	}
}

// apply runs f on the key at at, after its expiry if due, and records the
// change, if any.
func (k *keyTrack) apply(at int64, f func()) {
	if k.present && k.exp != 0 && at >= k.exp {
		k.present = false
		k.changes = append(k.changes, KeyChange{At: k.exp})
	}
	was := KeyChange{Present: k.present, Value: k.value, Exp: k.exp}
	f()
	if !k.present {
		k.value, k.exp = "", 0
	}
	if now := (KeyChange{Present: k.present, Value: k.value, Exp: k.exp}); now != was {
		now.At = at
		k.changes = append(k.changes, now)
	}
}

// Changes returns the changes of the tracked key on master m, in its
// order; nil when untracked.
func (w *Witness) Changes(m int, key string) []KeyChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m >= len(w.states) || w.states[m][key] == nil {
		return nil
	}
	return slices.Clone(w.states[m][key].changes)
}

// A Span is a stretch of time, in µs since the epoch by the masters'
// clocks; To is math.MaxInt64 for one that has not ended.
type Span struct{ From, To int64 }

// Presence returns, from a key's changes on one master (Changes), the
// stretches during which it existed, each with its value and the expiry it
// had when it ended (0: none): a key deleted before it expired would have
// lasted until then.
func Presence(changes []KeyChange) []Present {
	var out []Present
	for i, c := range changes {
		if !c.Present {
			continue
		}
		to := int64(math.MaxInt64)
		if i+1 < len(changes) {
			to = changes[i+1].At
		}
		if c.Exp != 0 && c.Exp < to {
			to = c.Exp
		}
		if to > c.At {
			out = append(out, Present{Span: Span{c.At, to}, Value: c.Value, Exp: c.Exp})
		}
	}
	return out
}

// A Present is a stretch during which a key existed with Value; Exp is the
// expiry it had last (0: none).
type Present struct {
	Span
	Value string
	Exp   int64
}

// ValueAt returns the key's value on the master at t from its changes
// ("" and false when absent).
func ValueAt(changes []KeyChange, t int64) (string, bool) {
	for _, p := range Presence(changes) {
		if p.From <= t && t < p.To {
			return p.Value, true
		}
	}
	return "", false
}
