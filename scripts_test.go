package redlock

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// The digests in scripts.go are written out by hand; Redis names scripts by
// the SHA1 of their source.
func TestScriptDigests(t *testing.T) {
	for name, s := range map[string]script{
		"release":       releaseScript,
		"extend":        extendScript,
		"acquireFenced": acquireFencedScript,
		"raise":         raiseScript,
		"extendFenced":  extendFencedScript,
		"fencedWrite":   fencedWriteScript,
	} {
		sum := sha1.Sum([]byte(s.src))
		if got := hex.EncodeToString(sum[:]); got != s.sha {
			t.Errorf("%s: sha %s, want %s", name, s.sha, got)
		}
	}
}
