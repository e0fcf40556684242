package redlock

import (
	"strings"
	"unicode/utf8"
)

// Holder info ([WithHolderInfo]) travels in the lock's token, so that every
// script takes the lock as it takes any other (the key's value is the
// token, maybe followed by a waiter's mark) and [Client.Inspect] reads it
// with the token:
//
//   - A token is its random part, 128 bits from crypto/rand in URL-safe
//     base64 (22 characters, none of them holderSep: newToken), then, with
//     holder info, holderSep and the info escaped by escapeHolder.
//   - The escaped info holds no wake.Mark "!": the scripts take a key's
//     value as ours when it is the token or starts with the token and the
//     mark, which is exact only while no token holds the mark
//     (TestHolderInfoWithTheWaitMarkRoundTrips, FuzzHolderInfo).
//   - It holds no holderSep either, so the first holderSep of a token ends
//     its random part, and escaping '%' makes unescapeHolder the exact
//     inverse of escapeHolder (FuzzHolderInfo).
//   - It holds no control character (C0, DEL, C1) and no byte of invalid
//     UTF-8: a token is an environment variable (`redlock run`'s
//     REDLOCK_TOKEN, where a NUL cannot go), a line of `redis-cli GET`, a
//     field of a log line (TestEscapedHolderInfo, FuzzHolderInfo).
//   - Everything else stays as it is (spaces, '=', printable UTF-8), so
//     that the key's value reads as the info.
//
// The info is at most maxHolderInfo bytes before escaping, three times
// that after: a token stays small beside the requests that carry it.
const (
	holderSep     = "~" // between the random part and the escaped holder info
	maxHolderInfo = 256 // bytes of holder info, before escaping
)

// holderTail returns what follows the random part of a token that carries
// info: holderSep and the escaped info; "" for no info.
func holderTail(info string) string {
	if info == "" {
		return ""
	}
	return holderSep + escapeHolder(info)
}

// holderInfo returns the holder info a token carries, unescaped: what
// follows its first holderSep; "" when it has none. It takes any string,
// also a key's value that no Client wrote, and never fails: a '%' not
// followed by two hex digits stays as it is (TestHolderInfoOfAnyValue).
func holderInfo(token string) string {
	_, tail, ok := strings.Cut(token, holderSep)
	if !ok {
		return ""
	}
	return unescapeHolder(tail)
}

// escapeHolder percent-encodes, byte by byte with upper-case hex, '%',
// '!', '~', the control characters (below 0x20, 0x7f, U+0080 to U+009F)
// and the bytes of invalid UTF-8; the rest stays as it is.
func escapeHolder(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if keptInHolder(r, n) {
			b.WriteString(s[i : i+n])
		} else {
			for _, c := range []byte(s[i : i+n]) {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&0xf])
			}
		}
		i += n
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

// keptInHolder reports whether escapeHolder keeps the rune r, n bytes
// long, as it is.
func keptInHolder(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1: // a byte of invalid UTF-8
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return false
	case r == '%', r == '!', r == '~':
		return false
	}
	return true
}

// unescapeHolder reverses escapeHolder. It takes any string: a '%' not
// followed by two hex digits stays as it is.
func unescapeHolder(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// unhex returns the value of the hex digit c (either case).
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
