package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"
)

// The digests in scripts.go are written out by hand; Redis names scripts by
// the SHA1 of their source, the file without its header.
func TestScriptDigests(t *testing.T) {
	for i, s := range All {
		sum := sha1.Sum([]byte(s.Src))
		if got := hex.EncodeToString(sum[:]); got != s.SHA {
			t.Errorf("script %d (%s): sha %s, want %s", i, s.Name, s.SHA, got)
		}
	}
}

// TestEveryScriptFileOpensWithItsHeader: every .lua file is one of All,
// and says in its header what it takes (KEYS) and what it returns; the
// source sent to a master starts with code, not with a comment.
func TestEveryScriptFileOpensWithItsHeader(t *testing.T) {
	names, err := fs.Glob(files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range All {
		listed[s.Name] = true
		if strings.HasPrefix(s.Src, "--") || strings.HasPrefix(s.Src, "\n") || !strings.HasSuffix(s.Src, "\n") {
			t.Errorf("%s: the source sent starts %.20q and ends %q, want code, ending in one newline", s.Name, s.Src, s.Src[len(s.Src)-1:])
		}
	}
	for _, name := range names {
		if !listed[name] {
			t.Errorf("%s is not in All: no master would load it", name)
		}
		b, _ := files.ReadFile(name)
		head, _, _ := strings.Cut(string(b), "\n\n")
		if !strings.HasPrefix(head, "-- ") || !strings.Contains(head, "KEYS") || !strings.Contains(head, "returns") {
			t.Errorf("%s: its header does not say what it takes (KEYS) and returns", name)
		}
	}
	if len(names) != len(All) {
		t.Errorf("%d script files, %d scripts in All", len(names), len(All))
	}
}
