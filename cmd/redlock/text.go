package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// plainToken reports whether s prints as itself in output that separates
// fields with tabs and quotes: printable ASCII, no space, no quote or
// backslash. A lock's token without holder info always is; one with it
// (the random part, "~" and the escaped info) is when the info is too.
func plainToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// quoteToken returns s as is when it is a plain token, else quoted with
// Go's escapes ("\x1b[2J\tfoo"), so that a stored value cannot forge
// fields or lines, or drive the terminal.
func quoteToken(s string) string {
	if plainToken(s) {
		return s
	}
	return strconv.QuoteToASCII(s)
}

// escapeControl escapes what is not printable in a message meant for one
// line (control characters, tabs, newlines, invalid UTF-8) with Go's
// escapes, and leaves the rest as it is.
// escaping writes what it is given with control characters escaped, line
// by line: a master's answer in a log line cannot drive the terminal.
type escaping struct{ w io.Writer }

func (e escaping) Write(p []byte) (int, error) {
	s := strings.TrimSuffix(string(p), "\n")
	if _, err := io.WriteString(e.w, escapeControl(s)+"\n"); err != nil {
		return 0, err
	}
	return len(p), nil
}

func escapeControl(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
