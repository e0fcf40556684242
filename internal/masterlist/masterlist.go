// Package masterlist splits a comma-separated list of masters, as the
// command's --masters and the benchmark's -masters take it.
package masterlist

import "strings"

// Split splits list at the commas that separate masters. A comma may also
// stand unencoded in a URL's user part (redis://bob:pa,ss@host:6379): a
// piece is joined to the URL before it when that URL names no user part
// yet and a piece before the next URL holds the '@' that ends it. Splitting
// such a password would print part of it in the error about the piece.
func Split(list string) []string {
	pieces := strings.Split(list, ",")
	var out []string
	for i := 0; i < len(pieces); i++ {
		spec := pieces[i]
		if strings.Contains(spec, "://") && !hasUser(spec) {
			// Look ahead, up to the next URL, for the '@' of a user part.
			for j := i + 1; j < len(pieces) && !strings.Contains(pieces[j], "://"); j++ {
				if strings.Contains(pieces[j], "@") {
					spec = strings.Join(pieces[i:j+1], ",")
					i = j
					break
				}
			}
		}
		out = append(out, spec)
	}
	return out
}

// hasUser reports whether the URL spec has an '@' in its authority.
func hasUser(spec string) bool {
	_, rest, _ := strings.Cut(spec, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "@")
}
