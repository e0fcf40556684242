package redlock

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// The digests in scripts.go are written out by hand; Redis names scripts by
// the SHA1 of their source.
func TestScriptDigests(t *testing.T) {
	for i, s := range scripts {
		sum := sha1.Sum([]byte(s.src))
		if got := hex.EncodeToString(sum[:]); got != s.sha {
			t.Errorf("script %d: sha %s, want %s", i, s.sha, got)
		}
	}
}
