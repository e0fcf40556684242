module github.com/redlock-go/redlock/bench

go 1.26.0

// The replace directive builds this module against the library in this
// working tree; it applies only inside the repository (the go command ignores
// a dependency's replace). Elsewhere the require below names the library at a
// commit of this repository, which scripts/check-modules.sh checks.
replace github.com/redlock-go/redlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/redlock-go/redlock v0.0.0-20261204135202-f22113d5880c
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
