// Package masterlist splits a comma-separated list of masters, as the
// command's --masters and the benchmark's -masters take it.
package masterlist

import (
	"fmt"
	"strings"
)

// Split splits list at its commas. A ',' may stand unencoded in a URL's
// user part (redis://bob:pa,ss@host:6379), which no split can tell from two
// masters for sure; such a list always leaves a piece with an '@' and no
// scheme (the '@' that ends the user part comes after the ','), and Split
// refuses it, naming the piece by its position only: its text may hold a
// part of a password. A master without a scheme has no user part anyway.
func Split(list string) ([]string, error) {
	pieces := strings.Split(list, ",")
	for i, p := range pieces {
		if strings.Contains(p, "@") && !strings.Contains(p, "://") {
			return nil, fmt.Errorf("master %d of %d has a user part but no scheme, or a password before it holds a ',' (write it %%2C): not shown, it may hold a password", i+1, len(pieces))
		}
	}
	return pieces, nil
}
