package masterlist

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"a:1,b:2,c:3", []string{"a:1", "b:2", "c:3"}},
		{"redis://a:1,redis://:pw@b:2", []string{"redis://a:1", "redis://:pw@b:2"}},
		{"redis://bob:pa%2Css@a:1,b:2", []string{"redis://bob:pa%2Css@a:1", "b:2"}},
		{"unix:///tmp/r.sock,a:1", []string{"unix:///tmp/r.sock", "a:1"}},
		{"a:1,,b:2", []string{"a:1", "", "b:2"}},
	} {
		if got, err := Split(tc.list); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
	// A ',' in a user part, wherever the '@'s are: refused, and the error
	// repeats nothing of the list.
	for _, list := range []string{
		"redis://bob:Xq7,Zr9@a:1",
		"redis://bob:X,q,7@a:1,b:2",
		"redis://ops@corp:Xq7,Zr9@a:1",
		"redis://bob:Q9@h7:Xq,Zr9@a:1",
		"a:1,bob:Xq7@b:2",
	} {
		got, err := Split(list)
		if err == nil {
			t.Errorf("Split(%q) = %q, want an error", list, got)
			continue
		}
		for _, secret := range []string{"Xq", "Zr9", "q,7", "corp", "h7"} {
			if strings.Contains(list, secret) && strings.Contains(err.Error(), secret) {
				t.Errorf("Split(%q): the error repeats %q: %v", list, secret, err)
			}
		}
	}
}
