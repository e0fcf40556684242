package main

import "github.com/redlock-go/redlock/internal/redistest"

// startServers starts n redis-servers on free loopback ports, without persistence.
func startServers(n int) ([]server, error) {
	ss, err := redistest.NewServers(n, redistest.Options{})
	if err != nil {
		return nil, err
	}
	out := make([]server, n)
	for i, s := range ss {
		out[i] = s
	}
	return out, nil
}
