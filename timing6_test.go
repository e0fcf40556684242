package redlock_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/masterlist"
)

// TestMastersListKeepsAPasswordWithAnAtWhole: masterlist.Split joins a
// URL to the pieces after it only when the URL "names no user part yet"
// (hasUser). But an unencoded '@' in a password, or in a user name (an
// e-mail-like ACL user), already looks like the end of a user part in the
// piece before the ',': "redis://ops@corp:Xq7,Zr9@127.0.0.1:1" is split
// into "redis://ops@corp:Xq7" and "Zr9@127.0.0.1:1". Whole, the URL is a
// valid master (url.Parse takes the last '@': user "ops@corp", password
// "Xq7,Zr9"); split, its first piece names host "corp" and port "Xq7", and
// safeName, which finds one '@' in it, prints "corp:Xq7" in the usage
// error: a part of the password. Likewise for the password
// "Q9@h7:Xq,Zr9" ("h7:Xq" printed).
//
// Split now refuses any list with a piece that has an '@' but no scheme
// (what a ',' in a user part always leaves), naming it by position only:
// no split can tell such a list from two masters for sure.
func TestMastersListKeepsAPasswordWithAnAtWhole(t *testing.T) {
	for _, spec := range []string{
		"redis://ops@corp:Xq7,Zr9@127.0.0.1:1",
		"redis://bob:Q9@h7:Xq,Zr9@127.0.0.1:1",
	} {
		if _, err := redlock.MasterOptions(spec); err != nil {
			t.Fatalf("MasterOptions(%q), whole: %v", spec, err)
		}
		if got, err := masterlist.Split(spec); err == nil {
			t.Errorf("Split(%q) = %q: a master cut at a ',' of its password, without an error", spec, got)
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cmd/redlock")
	}
	bin := filepath.Join(t.TempDir(), "redlock")
	if out, err := exec.Command(gobin, "build", "-o", bin, "./cmd/redlock").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/redlock: %v\n%s", err, out)
	}
	for _, c := range []struct{ spec, secret string }{
		{"redis://ops@corp:Xq7,Zr9@127.0.0.1:1", "Xq7"},
		{"redis://bob:Q9@h7:Xq,Zr9@127.0.0.1:1", "h7:Xq"},
	} {
		out, _ := exec.Command(bin, "status", "--masters", c.spec, "--key", "k", "--node-timeout", "50ms").CombinedOutput()
		if strings.Contains(string(out), c.secret) {
			t.Errorf("redlock status --masters %q repeats %q of its password:\n%s", c.spec, c.secret, out)
		}
	}
}
