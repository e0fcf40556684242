package masterlist

import (
	"strings"
	"testing"
)

// FuzzSplit: whatever the list, Split either returns pieces that join back
// into it, or an error that shows no text of the list past its scheme
// separators: a piece it refuses may hold a part of a password.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6379",
		"a:1,b:2,c:3",
		"redis://bob:secret@host:6379,redis://h2:6379",
		"redis://bob:pa,ss@host:6379",
		"bob:pw@host:6379",
		",,@,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		pieces, err := Split(list)
		if err == nil {
			if got := strings.Join(pieces, ","); got != list {
				t.Fatalf("Split(%q) = %q, which joins to %q", list, pieces, got)
			}
			return
		}
		msg := err.Error()
		for _, p := range strings.Split(list, ",") {
			// Every piece a password could be in: text before an '@'.
			if i := strings.LastIndexByte(p, '@'); i > 0 {
				if secret := p[:i]; len(secret) >= 4 && strings.Contains(msg, secret) {
					t.Fatalf("Split(%q): error %q shows %q, which may hold a password", list, msg, secret)
				}
			}
		}
	})
}
