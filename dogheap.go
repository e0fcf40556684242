package redlock

// A dogHeap orders watchdogs by a key, a time in ns since the Client's
// epoch: the waiting ones by when their next turn is, the ready ones by
// the end of their lock's validity. Its entries carry their keys, so that
// ordering reads no watchdog; an entry whose watchdog moved (a later push)
// or ended (forget) is stale and skipped when it comes to the top, so that
// neither needs to find it in the heap.
type dogHeap []dogEntry

// A dogEntry is a watchdog's place in a dogHeap: live while gen is the
// watchdog's.
type dogEntry struct {
	key int64
	w   *watchdog
	gen uint32
}

func (e dogEntry) live() bool { return e.gen == e.w.gen }

// push puts w in h under key, making any entry of it stale.
func (h *dogHeap) push(w *watchdog, key int64) {
	w.gen++
	*h = append(*h, dogEntry{key, w, w.gen})
	s := *h
	i := len(s) - 1
	e := s[i]
	for i > 0 {
		p := (i - 1) / 2
		if s[p].key <= e.key {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = e
}

// forget makes w's entry stale.
func forget(w *watchdog) { w.gen++ }

// first returns the first live entry, dropping the stale ones before it.
func (h *dogHeap) first() (dogEntry, bool) {
	for len(*h) > 0 {
		if e := (*h)[0]; e.live() {
			return e, true
		}
		h.pop()
	}
	return dogEntry{}, false
}

// pop removes the first entry, live or not.
func (h *dogHeap) pop() {
	s := *h
	n := len(s) - 1
	e := s[n]
	s[n] = dogEntry{}
	s = s[:n]
	*h = s
	if n == 0 {
		return
	}
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s[r].key < s[c].key {
			c = r
		}
		if e.key <= s[c].key {
			break
		}
		s[i] = s[c]
		i = c
	}
	s[i] = e
}

// each calls f for each live entry of h once.
func (h dogHeap) each(f func(w *watchdog)) {
	for _, e := range h {
		if e.live() {
			f(e.w)
		}
	}
}
