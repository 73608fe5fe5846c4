package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix marks a serialised Standard Webhooks symmetric signing secret.
const SecretPrefix = "whsec_"

const (
	// secretSize is what GenerateSecret hands out: the dispatcher's rules fix 32 bytes, the SHA-256
	// output size, which sits inside the Standard Webhooks range of 24..64.
	secretSize = 32

	// The spec bounds symmetric secrets to 24..64 bytes; shorter keys are weak and
	// longer ones buy nothing with SHA-256 (HMAC hashes keys above 64 bytes anyway).
	minSecretSize = 24
	maxSecretSize = 64
)

// ErrInvalidSecret reports a signing secret that cannot be used. Errors wrapping it
// describe what is wrong with the secret's shape but never contain the secret.
var ErrInvalidSecret = errors.New("webhook: invalid signing secret")

// GenerateSecret returns a new random signing secret in its serialised form:
// "whsec_" followed by the padded standard base64 encoding of 32 random bytes.
func GenerateSecret() (string, error) {
	key := make([]byte, secretSize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("webhook: generate secret: %w", err)
	}
	return FormatSecret(key), nil
}

// FormatSecret serialises an HMAC key as a signing secret: "whsec_"
// followed by its padded standard base64 encoding, the form ParseSecret
// reads.
func FormatSecret(key []byte) string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// ParseSecret decodes a serialised signing secret into its HMAC key.
//
// The "whsec_" prefix is optional. The remainder must be padded standard base64
// (as the Go and Rust reference libraries require) and decode to 24..64 bytes.
func ParseSecret(s string) ([]byte, error) {
	enc := strings.TrimPrefix(s, SecretPrefix)
	if enc == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidSecret)
	}
	// Same decoder as the Go and Rust reference libraries, so a secret one of them
	// accepts is accepted here and vice versa. Unpadded input is refused on purpose:
	// those libraries refuse it too, and a receiver must not be the only party able to
	// load the secret it was handed.
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// The decoder's error carries an input offset only, but dropping it keeps the
		// message free of anything derived from the secret.
		return nil, fmt.Errorf("%w: not padded standard base64", ErrInvalidSecret)
	}
	if len(key) < minSecretSize || len(key) > maxSecretSize {
		return nil, fmt.Errorf("%w: decoded length %d bytes, want %d..%d",
			ErrInvalidSecret, len(key), minSecretSize, maxSecretSize)
	}
	return key, nil
}
