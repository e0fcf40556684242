package wake

import (
	"strings"
	"testing"
)

// FuzzSplitRelease: whatever a master publishes on a wake channel (keys
// may hold any byte, zero bytes included), SplitRelease either declines it
// or splits it into a key and a queue of whole ids that join back into the
// message, and Queued finds in that queue exactly the ids it holds.
func FuzzSplitRelease(f *testing.F) {
	for _, s := range []string{"k", "k\x00AAAAAAAA", "k\x00AAAAAAAABBBBBBBB", "a\x00b\x00CCCCCCCC", "\x00", "k\x00AAAA", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		key, q, ok := SplitRelease(msg)
		if !ok {
			if key != "" || q != "" {
				t.Fatalf("SplitRelease(%q) declined but returned %q, %q", msg, key, q)
			}
			return
		}
		if key+"\x00"+q != msg {
			t.Fatalf("SplitRelease(%q) = %q, %q: they do not join back", msg, key, q)
		}
		if len(q) < IDLen || len(q)%IDLen != 0 {
			t.Fatalf("SplitRelease(%q): queue %q is not whole ids", msg, q)
		}
		if strings.IndexByte(q, 0) >= 0 {
			t.Fatalf("SplitRelease(%q): queue %q holds a zero byte: the split is not at the last one", msg, q)
		}
		for i := 0; i < len(q); i += IDLen {
			if !Queued(q, q[i:i+IDLen]) {
				t.Fatalf("Queued(%q, %q) = false for an id it holds", q, q[i:i+IDLen])
			}
		}
	})
}
