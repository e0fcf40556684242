package chaos

import "sync"

// A FencedResource is a storage service that checks fencing tokens: it
// accepts a write iff the fence is above the highest seen for the key, or
// equal to it from the same holder. An equal fence from another holder is
// an equal-fence conflict: rejected, unless AdmitEqual (the rule "not below
// the highest seen", which then lets two holders through).
type FencedResource struct {
	AdmitEqual bool

	mu             sync.Mutex
	top            map[string]fenceHolder
	accepted       int
	staleRejected  int
	equalConflicts int
	writes         []Write
}

type fenceHolder struct {
	fence  int64
	holder string
}

// A Write is one accepted write, in the order the resource applied them.
type Write struct {
	Key, Holder string
	Fence       int64
}

// Write offers one write and reports whether the resource took it.
func (r *FencedResource) Write(key, holder string, fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.top == nil {
		r.top = map[string]fenceHolder{}
	}
	top, seen := r.top[key]
	switch {
	case !seen || fence > top.fence:
	case fence == top.fence && holder == top.holder:
	case fence == top.fence:
		r.equalConflicts++
		if !r.AdmitEqual {
			return false
		}
	default:
		r.staleRejected++
		return false
	}
	r.top[key] = fenceHolder{fence, holder}
	r.accepted++
	r.writes = append(r.writes, Write{key, holder, fence})
	return true
}

// FenceStats are the resource's figures.
type FenceStats struct {
	Accepted, StaleRejected, EqualConflicts int
	// Interleaved counts accepted writes by a holder that come after
	// another holder's accepted write to the same key, when that holder had
	// written before: two holders' writes interleaved at the resource.
	Interleaved int
}

// Stats returns the counts so far.
func (r *FencedResource) Stats() FenceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := FenceStats{Accepted: r.accepted, StaleRejected: r.staleRejected, EqualConflicts: r.equalConflicts}
	last := map[string]string{}
	done := map[string]map[string]bool{}
	for _, w := range r.writes {
		if done[w.Key] == nil {
			done[w.Key] = map[string]bool{}
		}
		if l, ok := last[w.Key]; ok && l != w.Holder && done[w.Key][w.Holder] {
			s.Interleaved++
		}
		if l, ok := last[w.Key]; ok && l != w.Holder {
			done[w.Key][l] = true
		}
		last[w.Key] = w.Holder
	}
	return s
}
