package redlock

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzHolderInfo: escapeHolder then unescapeHolder returns the info; the
// escaped form is valid UTF-8 without the wait mark "!", the separator '~'
// or a control character, so a token that carries it is read back by
// holderInfo; holderInfo and unescapeHolder take any string without
// panicking.
func FuzzHolderInfo(f *testing.F) {
	f.Add("host=a pid=1 cmd=backup")
	f.Add("50% done! ~ %21 %zz %")
	f.Add("line\nnext\x00\x1b[2J\x7f\u0085")
	f.Add("crème, 東京, 🔒")
	f.Add("bad\xff\xc3")
	f.Add("")
	f.Fuzz(func(t *testing.T, info string) {
		esc := escapeHolder(info)
		if back := unescapeHolder(esc); back != info {
			t.Fatalf("escapeHolder(%q) = %q, which unescapes to %q", info, esc, back)
		}
		if strings.ContainsAny(esc, "!~") || !utf8.ValidString(esc) || strings.ContainsFunc(esc, unicode.IsControl) {
			t.Fatalf("escapeHolder(%q) = %q holds '!', '~', a control character or invalid UTF-8", info, esc)
		}
		if got := holderInfo("AAAAAAAAAAAAAAAAAAAAAA" + holderTail(info)); got != info {
			t.Fatalf("the token with info %q reads back %q", info, got)
		}
		_ = holderInfo(info)     // any key value
		_ = unescapeHolder(info) // any escaped form
	})
}
