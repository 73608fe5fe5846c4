package delivery

import (
	"context"
	"crypto/sha256"
	"fmt"
)

// LeasePrefix is how every lease token of the process with member id member
// (internal/partition) begins: the first 8 bytes of its SHA-256.
func LeasePrefix(member string) [8]byte {
	sum := sha256.Sum256([]byte(member))
	var p [8]byte
	copy(p[:], sum[:8])
	return p
}

// releaseDeadSQL releases every lease whose token begins with one of the
// prefixes ($1), and announces each release (as settle does) so a process
// waiting for one takes it at once.
const releaseDeadSQL = `
WITH released AS (
    UPDATE webhook_endpoints
       SET busy_until = NULL, lease_token = NULL
     WHERE busy_until IS NOT NULL AND substr(uuid_send(lease_token), 1, 8) = ANY($1::bytea[])
 RETURNING id
)
SELECT count(pg_notify($2, 'r:' || id::text))::int FROM released`

// ReleaseLeasesOf releases the endpoint leases held by the processes with
// the given member ids, which must be dead: gone with their database
// sessions, so not sending anything any more (a SIGKILLed process's
// connections to receivers close with it). Without this, each lease would
// block its endpoint until it expired (LeaseTTL). It returns how many it
// released.
//
// It must never be called for a process that may still be alive (one that
// is only slow, or whose sessions cannot be told): a request it still has in
// flight could then overlap one from the next holder.
func (w *Worker) ReleaseLeasesOf(ctx context.Context, members []string) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	prefixes := make([][]byte, len(members))
	for i, m := range members {
		p := LeasePrefix(m)
		prefixes[i] = p[:]
	}
	var n int
	if err := w.pool.QueryRow(ctx, releaseDeadSQL, prefixes, w.cfg.Channel).Scan(&n); err != nil {
		return 0, fmt.Errorf("release the leases of dead processes: %w", err)
	}
	return n, nil
}
