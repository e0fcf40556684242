package chaos

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
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
// LOAD, or EVAL): PEXPIRE makes an extend, INCR a fenced acquire, DEL a
// release. An EVALSHA of a script the master has not been given fails with
// NOSCRIPT and does not count. A lock token is the first argument after the
// keys. Every master must start empty with the witness watching.
type Witness struct {
	prefix string
	conns  []net.Conn
	wg     sync.WaitGroup

	mu      sync.Mutex
	cond    sync.Cond
	scripts map[string]string // sha1 -> kind
	loaded  []map[string]bool // per master: the scripts it has (an EVALSHA of another fails NOSCRIPT, yet MONITOR shows it)
	cur     []witnessCmd      // per master: the last command from a client, for the lua lines after it
	seq     []int64           // per master: lines seen
	tokens  map[string][]WitnessEvent
	keep    map[string]bool // tokens of holds, never pruned
	marks   []map[string]bool
	lines   int64
	err     error
}

// WitnessEvent kinds.
const (
	EvAcquire = "acquire" // SET of the token: the acquire (top level, or in a fenced acquire)
	EvExtend  = "extend"  // an extend script called with the token
	EvRetake  = "retake"  // the SET an extend script made: the key was absent
	EvRelease = "release" // a release script called with the token
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

type witnessCmd struct {
	kind, token, key string
}

// NewWitness starts MONITOR on each address; keys outside prefix are
// ignored. Close it when done.
func NewWitness(addrs []string, prefix string) (*Witness, error) {
	w := &Witness{prefix: prefix, scripts: map[string]string{}, tokens: map[string][]WitnessEvent{}, keep: map[string]bool{},
		cur: make([]witnessCmd, len(addrs)), seq: make([]int64, len(addrs))}
	w.cond.L = &w.mu
	for i, a := range addrs {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.conns = append(w.conns, c)
		w.marks = append(w.marks, map[string]bool{})
		w.loaded = append(w.loaded, map[string]bool{})
		c.SetDeadline(time.Now().Add(time.Second))
		r := bufio.NewReaderSize(c, 1<<16)
		if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
			w.Close()
			return nil, err
		}
		if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
			w.Close()
			return nil, fmt.Errorf("chaos: MONITOR on %s: %q %v", a, l, err)
		}
		c.SetDeadline(time.Time{})
		w.wg.Go(func() { w.read(i, r) })
	}
	return w, nil
}

// Close stops watching and waits for the readers.
func (w *Witness) Close() {
	for _, c := range w.conns {
		c.Close()
	}
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

func (w *Witness) read(m int, r *bufio.Reader) {
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				w.mu.Lock()
				if w.err == nil {
					w.err = fmt.Errorf("chaos: witness of master %d: %w", m, err)
				}
				w.cond.Broadcast()
				w.mu.Unlock()
			}
			return
		}
		w.line(m, strings.TrimRight(l, "\r\n"))
	}
}

// line takes one MONITOR line of master m:
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
	if src != "lua" {
		w.cur[m] = witnessCmd{}
	}
	ev := func(kind, token, key string) {
		w.tokens[token] = append(w.tokens[token], WitnessEvent{Master: m, Seq: w.seq[m], At: at, Kind: kind, Key: key})
	}
	switch {
	case src == "lua":
		c := w.cur[m]
		switch {
		case cmd == "set" && len(args) >= 3 && c.kind == EvExtend && args[2] == c.token:
			ev(EvRetake, c.token, args[1])
		case cmd == "set" && len(args) >= 3 && c.kind == EvAcquire && args[2] == c.token:
			ev(EvAcquire, c.token, args[1])
		case cmd == "del" && c.kind == EvRelease:
			ev(EvDelete, c.token, c.key)
		}
	case cmd == "echo" && len(args) == 2:
		w.marks[m][args[1]] = true
		w.cond.Broadcast()
	case cmd == "script" && len(args) == 3 && strings.EqualFold(args[1], "load"):
		w.loaded[m][w.learn(args[2])] = true
	case cmd == "eval" || cmd == "evalsha":
		if len(args) < 3 {
			return
		}
		sha := strings.ToLower(args[1])
		if cmd == "eval" {
			sha = w.learn(args[1])
			w.loaded[m][sha] = true
		}
		if !w.loaded[m][sha] {
			return // NOSCRIPT: it did not run
		}
		kind := w.scripts[sha]
		n, err := strconv.Atoi(args[2])
		if kind == "" || err != nil || n < 1 || len(args) < 3+n+1 || !strings.HasPrefix(args[3], w.prefix) {
			return
		}
		key, token := args[3], args[3+n]
		w.cur[m] = witnessCmd{kind: kind, token: token, key: key}
		if kind != EvAcquire { // a fenced acquire counts when its SET runs
			ev(kind, token, key)
		}
	case cmd == "set" && len(args) >= 3 && strings.HasPrefix(args[1], w.prefix):
		ev(EvAcquire, args[2], args[1])
	}
}

// learn classifies a script by its source and returns its sha1.
func (w *Witness) learn(src string) string {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	switch s := strings.ToUpper(src); {
	case strings.Contains(s, "'PEXPIRE'") || strings.Contains(s, `"PEXPIRE"`):
		w.scripts[sha] = EvExtend
	case strings.Contains(s, "'INCR'") || strings.Contains(s, `"INCR"`):
		w.scripts[sha] = EvAcquire
	case strings.Contains(s, "'DEL'") || strings.Contains(s, `"DEL"`):
		w.scripts[sha] = EvRelease
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
