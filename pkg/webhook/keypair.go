package webhook

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Standard Webhooks' asymmetric scheme, "v1a": the sender signs with an
// Ed25519 private key and receivers verify with the public key, so a
// receiver holds nothing that could forge a message.
const (
	// SigningKeyPrefix marks a serialised Ed25519 private key ("whsk_").
	SigningKeyPrefix = "whsk_"
	// PublicKeyPrefix marks a serialised Ed25519 public key ("whpk_"), what
	// a receiver verifies v1a signatures with.
	PublicKeyPrefix = "whpk_"
)

// ErrInvalidKey reports an Ed25519 key that cannot be used. Errors wrapping it
// describe the key's shape but never contain the key.
var ErrInvalidKey = errors.New("webhook: invalid Ed25519 key")

// GenerateKeyPair returns a new Ed25519 key pair in its serialised forms:
// "whsk_" + padded standard base64 of the 64-byte private key (seed then
// public key, the form Svix and the JavaScript library use), and "whpk_" +
// that of the 32-byte public key.
func GenerateKeyPair() (signingKey, publicKey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("webhook: generate key pair: %w", err)
	}
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(priv), EncodePublicKey(pub), nil
}

// ParseSigningKey decodes a serialised Ed25519 private key. The "whsk_"
// prefix is optional. The remainder is padded standard base64 of either the
// 32-byte seed (the Go and Python drafts) or the 64-byte seed followed by
// its public key (Svix, JavaScript); in the second form the public half
// must match the seed.
func ParseSigningKey(s string) (ed25519.PrivateKey, error) {
	raw, err := decodeKey(strings.TrimPrefix(s, SigningKeyPrefix))
	if err != nil {
		return nil, err
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		key := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !bytes.Equal(key[ed25519.SeedSize:], raw[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("%w: its public half does not belong to its seed", ErrInvalidKey)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("%w: decoded length %d bytes, want %d (seed) or %d (seed and public key)",
			ErrInvalidKey, len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
	}
}

// ParsePublicKey decodes a serialised Ed25519 public key: "whpk_" (optional)
// and padded standard base64 of 32 bytes.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := decodeKey(strings.TrimPrefix(s, PublicKeyPrefix))
	if err != nil {
		return nil, err
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: decoded length %d bytes, want %d", ErrInvalidKey, len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// EncodePublicKey serialises pub as "whpk_" + padded standard base64.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

func decodeKey(enc string) ([]byte, error) {
	if enc == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: not padded standard base64", ErrInvalidKey)
	}
	return raw, nil
}
