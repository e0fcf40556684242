package wire

import "strings"

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// HashSlot returns the Redis Cluster hash slot of key, as Redis computes it:
// the CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key's hash
// tag, the part between its first '{' and the first '}' after it when that
// part is not empty, else of the whole key, modulo 16384. go-redis keeps its
// own in an internal package, out of reach. A lock on several keys needs
// them all in one slot on a Cluster, and the Client tells the caller so
// before any request rather than let the master refuse with CROSSSLOT.
func HashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}
