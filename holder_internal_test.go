package redlock

import (
	"errors"
	"strings"
	"testing"
)

// TestEscapedHolderInfo: escapeHolder percent-encodes '%', '!', '~', the
// control characters and invalid UTF-8, byte by byte, and keeps spaces,
// '=' and printable UTF-8 readable; unescapeHolder reads each back.
func TestEscapedHolderInfo(t *testing.T) {
	for _, tc := range []struct{ info, escaped string }{
		{"", ""},
		{"host=a pid=1 cmd=backup", "host=a pid=1 cmd=backup"},
		{"50% done!", "50%25 done%21"},
		{"a~b", "a%7Eb"},
		{"line\nnext\r\ttab\x00nul\x1b[2J", "line%0Anext%0D%09tab%00nul%1B[2J"},
		{"del\x7f", "del%7F"},
		{"crème brûlée, 東京, 🔒", "crème brûlée, 東京, 🔒"},
		{"c1\u0085", "c1%C2%85"},                       // NEL, a C1 control, in UTF-8
		{"bad\xff\xc3utf8", "bad%FF%C3utf8"},           // bytes of invalid UTF-8
		{"%21 is not a mark", "%2521 is not a mark"},   // an escape in the info stays the info's
		{`quote" back\slash`, `quote" back\slash`},     // printable: the command quotes it
		{"\u202eright-to-left", "\u202eright-to-left"}, // printable UTF-8 (a format character) stays
	} {
		got := escapeHolder(tc.info)
		if got != tc.escaped {
			t.Errorf("escapeHolder(%q) = %q, want %q", tc.info, got, tc.escaped)
		}
		if back := unescapeHolder(got); back != tc.info {
			t.Errorf("unescapeHolder(%q) = %q, want %q", got, back, tc.info)
		}
		tail := holderTail(tc.info)
		if (tail == "") != (tc.info == "") || (tail != "" && tail != "~"+tc.escaped) {
			t.Errorf("holderTail(%q) = %q, want \"~\"+%q (\"\" for no info)", tc.info, tail, tc.escaped)
		}
		if got := holderInfo("AAAAAAAAAAAAAAAAAAAAAA" + tail); got != tc.info {
			t.Errorf("holderInfo of the token with %q = %q", tail, got)
		}
	}
}

// TestHolderInfoOfAnyValue: holderInfo takes any key value, also one no
// Client wrote: what follows the first '~', with a '%' that starts no
// escape left as it is; "" without a '~'.
func TestHolderInfoOfAnyValue(t *testing.T) {
	for token, want := range map[string]string{
		"":                       "",
		"AAAAAAAAAAAAAAAAAAAAAA": "",
		"stranger":               "",
		"~":                      "",
		"x~a~b":                  "a~b",
		"x~%":                    "%",
		"x~%4":                   "%4",
		"x~%zz%41":               "%zzA",
		"x~%4a%4A":               "JJ",
		"x~100%":                 "100%",
	} {
		if got := holderInfo(token); got != want {
			t.Errorf("holderInfo(%q) = %q, want %q", token, got, want)
		}
	}
}

// TestNewTokenWithoutHolderInfoIsTheRandomPartAlone: without info a token
// is 22 characters of URL-safe base64; with it, the same random part, "~"
// and the escaped info, one '~' in all and no wait mark.
func TestNewTokenWithoutHolderInfoIsTheRandomPartAlone(t *testing.T) {
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	plain := newToken("")
	if len(plain) != 22 || strings.Trim(plain, b64) != "" {
		t.Errorf("newToken(\"\") = %q, want 22 characters of URL-safe base64", plain)
	}
	tok := newToken(holderTail("job!~%"))
	random, tail, _ := strings.Cut(tok, "~")
	if len(random) != 22 || strings.Trim(random, b64) != "" || tail != "job%21%7E%25" || strings.Count(tok, "!") != 0 {
		t.Errorf("newToken with info %q = %q, want 22 characters of URL-safe base64, \"~\" and %q", "job!~%", tok, "job%21%7E%25")
	}
	if newToken("") == plain {
		t.Error("two tokens are the same")
	}
}

// TestHolderInfoOptionIsChecked: WithHolderInfo takes at most 256 bytes
// (before escaping), says so with the length when refused, and applies to
// the calls that make a token only.
func TestHolderInfoOptionIsChecked(t *testing.T) {
	oc, err := obtainOptions([]ObtainOption{WithHolderInfo(strings.Repeat("é", 128))}, forObtain)
	if err != nil || oc.tokenTail != "~"+strings.Repeat("é", 128) {
		t.Errorf("256 bytes: tail %q, %v; want the info, no error", oc.tokenTail, err)
	}
	oc, err = obtainOptions([]ObtainOption{WithHolderInfo("")}, forObtain|forSet)
	if err != nil || oc.tokenTail != "" {
		t.Errorf("empty info: tail %q, %v; want none", oc.tokenTail, err)
	}
	_, err = obtainOptions([]ObtainOption{WithHolderInfo(strings.Repeat("x", 257))}, forObtain)
	if !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "redlock: ") || !strings.Contains(err.Error(), "257") || !strings.Contains(err.Error(), "256") {
		t.Errorf("257 bytes: %v; want ErrInvalidArgument naming the length and the limit", err)
	}
	_, err = obtainOptions([]ObtainOption{WithHolderInfo("x")}, forWatchdog)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithHolderInfo") {
		t.Errorf("KeepAlive's options: %v; want ErrInvalidArgument naming WithHolderInfo", err)
	}
}
