package redlock

import "github.com/redis/go-redis/v9"

// NewSingle returns a Client that locks on one master: a standalone server,
// a Sentinel failover client or a Redis Cluster (every script touches only
// the keys it is given, so lock keys may live in any slot). The lock's
// validity and semantics are those of [New] with a quorum of one.
//
// It is an efficiency lock: if the master fails over to a replica that had
// not yet received the key, or restarts without persistence, two holders can
// overlap. [WithReplicaAcks] closes the first gap for a master whose every
// replica must acknowledge a grant, not the second. Use fencing tokens
// checked by the resource, a constraint or a consensus store when
// correctness matters. NewSingle never closes rdb.
func NewSingle(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, invalid("nil client")
	}
	return New([]redis.UniversalClient{rdb}, opts...)
}
