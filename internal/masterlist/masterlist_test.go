package masterlist

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"a:1,b:2,c:3", []string{"a:1", "b:2", "c:3"}},
		{"redis://a:1,redis://:pw@b:2", []string{"redis://a:1", "redis://:pw@b:2"}},
		{"redis://bob:pa,ss@a:1,b:2", []string{"redis://bob:pa,ss@a:1", "b:2"}},
		{"redis://bob:p,a,ss@a:1,redis://c:3", []string{"redis://bob:p,a,ss@a:1", "redis://c:3"}},
		{"redis://bob:ok@a:1,b:2", []string{"redis://bob:ok@a:1", "b:2"}},
		{"unix:///tmp/r.sock,a:1", []string{"unix:///tmp/r.sock", "a:1"}},
		{"a:1,,b:2", []string{"a:1", "", "b:2"}},
	} {
		if got := Split(tc.list); !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q) = %q, want %q", tc.list, got, tc.want)
		}
	}
}
