//go:build chaos_fencing

package chaos

import "github.com/redlock-go/redlock"

var withFencing = redlock.WithFencing
