module github.com/redlock-go/redlock/redlockotel

go 1.26.0

// The replace directive builds this module against the library in this
// working tree; it applies only inside the repository (the go command ignores
// a dependency's replace). Elsewhere the require below names the library at a
// commit of this repository, which scripts/check-modules.sh checks.
replace github.com/redlock-go/redlock => ../

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redlock-go/redlock v0.0.0-20261204135202-f22113d5880c
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
