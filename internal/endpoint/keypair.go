package endpoint

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Signing schemes an endpoint may use (its signing_scheme column).
const (
	// SchemeV1 signs with a shared secret (HMAC-SHA256): the default.
	SchemeV1 = "v1"
	// SchemeV1a signs with an Ed25519 key pair: the private key stays sealed
	// here, receivers verify with the public key ("whpk_…"), which the owner
	// may read at any time.
	SchemeV1a = "v1a"
)

// FieldSignatureScheme names the create request's scheme field.
const FieldSignatureScheme = "signature_scheme"

// For a v1a endpoint, what is sealed (in secret_enc and previous_secret_enc,
// bound like a shared secret to the endpoint, its scheme and the column) is
// the 32-byte Ed25519 seed. The private key never leaves the dispatcher: neither
// create nor rotate shows it, since only the dispatcher signs.

// newKeyPair generates a key pair and seals its seed for endpoint id. It
// returns the public key's text and the sealed seed to store.
func newKeyPair(kr *seal.Keyring, id uuid.UUID) (publicKey string, sealed []byte, err error) {
	sk, pk, err := webhook.GenerateKeyPair()
	if err != nil {
		return "", nil, err
	}
	priv, err := webhook.ParseSigningKey(sk)
	if err != nil {
		return "", nil, fmt.Errorf("decode generated key: %w", err)
	}
	seed := priv.Seed()
	defer clear(seed)
	defer clear(priv)
	sealed, err = sealFor(kr, seed, keyBinding(id, SchemeV1a, ColumnSecret))
	if err != nil {
		return "", nil, fmt.Errorf("seal signing key: %w", err)
	}
	return pk, sealed, nil
}

// OpenSigningKeys unseals what endpoint id signs with at now, for its
// scheme: for v1 the HMAC keys (as OpenKeys), for v1a the Ed25519 private
// keys, the current one first and the previous one while its overlap lasts.
// k is the endpoint's columns as stored (the delivery worker reads them in
// its lease query). Errors name the endpoint and the seal failure, never key
// material.
func OpenSigningKeys(kr *seal.Keyring, id uuid.UUID, k seal.SigningKeys, now time.Time) (webhook.Keys, error) {
	switch k.Scheme {
	case SchemeV1, "":
		keys, err := OpenKeys(kr, id, k, now)
		return webhook.Keys{HMAC: keys}, err
	case SchemeV1a:
		seeds, err := OpenKeys(kr, id, k, now)
		if err != nil {
			return webhook.Keys{}, err
		}
		out := webhook.Keys{Ed25519: make([]ed25519.PrivateKey, 0, len(seeds))}
		for i, seed := range seeds {
			if len(seed) != ed25519.SeedSize {
				return webhook.Keys{}, fmt.Errorf("endpoint %s: signing key %d: sealed value is not an Ed25519 seed", id, i)
			}
			out.Ed25519 = append(out.Ed25519, ed25519.NewKeyFromSeed(seed))
			clear(seed)
		}
		return out, nil
	default:
		return webhook.Keys{}, fmt.Errorf("endpoint %s: unknown signing scheme", id)
	}
}

// OpenSigningKeys is the package's OpenSigningKeys with the opener's keyring.
func (o KeyOpener) OpenSigningKeys(id uuid.UUID, k seal.SigningKeys, now time.Time) (webhook.Keys, error) {
	return OpenSigningKeys(o.kr, id, k, now)
}
