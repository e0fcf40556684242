//go:build !chaos_fencing

package chaos

import "github.com/redlock-go/redlock"

// withFencing is redlock.WithFencing once the library has it; build with
// -tags chaos_fencing until then. nil: the fencing scenarios skip.
var withFencing func() redlock.Option
