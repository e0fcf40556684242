package wire

import (
	"strings"
	"testing"
)

// FuzzHashSlot: every key has a slot in range, and a key's hash tag (the
// part between its first '{' and the first '}' after it, when not empty)
// decides its slot alone, so a lock key and its fence counter share one.
func FuzzHashSlot(f *testing.F) {
	for _, s := range []string{"", "k", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{"} {
		f.Add(s, "suffix")
	}
	f.Fuzz(func(t *testing.T, key, suffix string) {
		slot := HashSlot(key)
		if slot < 0 || slot >= clusterSlots {
			t.Fatalf("HashSlot(%q) = %d, out of range", key, slot)
		}
		if strings.ContainsAny(key, "{}") || key == "" {
			return
		}
		tagged := "{" + key + "}" + suffix
		if got := HashSlot(tagged); got != slot {
			t.Fatalf("HashSlot(%q) = %d, HashSlot(%q) = %d: the tag does not decide the slot", key, slot, tagged, got)
		}
	})
}

// FuzzClientInfo: whatever a master answers to CLIENT INFO and INFO server
// (another server's format, a proxy's, garbage), parsing it never panics,
// and a connection's id is known only with its address: the barrier kills
// by both.
func FuzzClientInfo(f *testing.F) {
	for _, s := range []string{
		"id=7 addr=127.0.0.1:51234 laddr=127.0.0.1:6379 fd=8 name= age=0\n",
		"id=x addr=",
		"addr=1.2.3.4:5 id=99999999999999999999",
		"# Server\r\nrun_id:abc\r\nserver_time_usec:1700000000000000\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, info string) {
		id, addr := clientIdentity(info)
		if addr == "" && id != 0 {
			t.Fatalf("clientIdentity(%q) = %d, %q: an id without an address", info, id, addr)
		}
		for _, field := range []string{"run_id", "server_time_usec"} {
			if v := infoField(info, field); strings.Contains(v, "\n") || strings.HasSuffix(v, "\r") || v != strings.TrimSpace(v) {
				t.Fatalf("infoField(%q, %q) = %q: the line's end is in the value", info, field, v)
			}
		}
	})
}
