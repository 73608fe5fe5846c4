package seal

import "time"

// SigningKeys are an endpoint's signing keys as stored, still sealed: its
// signing_scheme, secret_enc, previous_secret_enc and
// previous_secret_expires_at columns. The deliver worker reads them with its
// lease and hands them unopened to internal/endpoint, the one place that
// holds the keyring and opens them.
type SigningKeys struct {
	// Scheme is the signing scheme ("v1", "v1a"; "" reads as "v1").
	Scheme string
	// Current is the sealed key the endpoint signs with.
	Current []byte
	// Previous is the sealed key of before a rotation, which also signs
	// until PreviousExpiresAt (nil, or nil expiry: none).
	Previous          []byte
	PreviousExpiresAt *time.Time
}
