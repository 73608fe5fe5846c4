// Package seal encrypts endpoint signing secrets at rest under a rotatable
// keyring of master keys, so a database dump alone never yields a secret
// that can forge deliveries.
//
// # Format
//
// A sealed value is
//
//	format (0x01 or 0x02) ‖ key id (uint32, big-endian) ‖ nonce (12) ‖ ciphertext ‖ tag (16)
//
// sealed with AES-256-GCM under a data key derived from the master key with
// HKDF-SHA256 (info "dispatcher/webhook-secret/aes-256-gcm/v1"). The
// associated data is format ‖ key id ‖ the caller's associated data, so a
// sealed value moved to another row, or relabelled with another key id or
// format, fails to open instead of decrypting under the wrong identity.
//
// The two formats differ only in what the caller binds a value to, which
// the format number tells it (FormatOf): format 1 values were bound to the
// endpoint id alone, so an endpoint's current signing key, its previous one
// and a key of the other scheme were interchangeable within its row; format
// 2 values, the only ones Seal writes, are bound to the endpoint id, its
// signing scheme and the column (internal/endpoint builds both). Open
// reads both; NeedsReseal is true for format 1, so the re-seal that
// rotation runs also upgrades them. Nonces are random; a key must not seal more than 2^32 values,
// which is far beyond the number of endpoint secrets a deployment will have.
//
// # Rotation
//
// A Keyring holds any number of master keys, each with a numeric id, one of
// them primary. Seal always uses the primary; Open picks the key named in the
// header, so values sealed under older keys keep working. To rotate:
//
//  1. add the new key, not yet primary, to every replica's keyring;
//  2. make it primary (first in the spec) everywhere;
//  3. re-seal every value for which NeedsReseal is true;
//  4. remove the old key.
//
// Doing step 1 before step 2 matters: a replica that has not seen the new key
// yet cannot open values another replica already sealed with it.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
)

const (
	// MinMasterKeyLen is the shortest master key accepted, in bytes: a master
	// key must carry at least the 256 bits of the AES key derived from it.
	MinMasterKeyLen = 32

	formatV1  byte = 0x01
	formatV2  byte = 0x02
	headerLen      = 1 + 4
	// overhead of cipher.NewGCMWithRandomNonce: 12-byte nonce + 16-byte tag.
	gcmOverhead = 12 + 16

	// hkdfInfo binds derived keys to this one purpose and format, so the same
	// master key could safely feed another purpose with a different info.
	hkdfInfo = "dispatcher/webhook-secret/aes-256-gcm/v1"
)

var (
	// ErrMalformed means the value is not a sealed value this package can
	// read: too short, or an unknown format.
	ErrMalformed = errors.New("seal: malformed sealed value")
	// ErrUnknownKey means the value names a key id the keyring does not hold,
	// typically because an old master key was removed too early.
	ErrUnknownKey = errors.New("seal: unknown master key id")
	// ErrAuth means the value failed authentication: it was tampered with,
	// relabelled, moved to another row (other associated data), or sealed
	// under a different master key with the same id.
	ErrAuth = errors.New("seal: authentication failed")
	// ErrInvalidKeyring is wrapped by every error from NewKeyring and
	// ParseKeyring.
	ErrInvalidKeyring = errors.New("seal: invalid keyring")
	// ErrNoKeyring is returned by methods called on a nil or zero Keyring.
	ErrNoKeyring = errors.New("seal: keyring not initialised")
	// ErrFormat1Refused means the value is in format 1 and the keyring
	// refuses that format (RefusingFormat1).
	ErrFormat1Refused = errors.New("seal: format 1 sealed value refused (-refuse-format1-secrets): run `dispatcher reseal-secrets`, or turn the option off")
)

// Keyring seals and opens values. It holds only the derived AEADs, never the
// master keys themselves, and is safe for concurrent use. It is immutable:
// rotation builds a new Keyring.
//
// The state sits behind an unexported pointer so that even a dereferenced
// Keyring printed through reflection shows an address, not cipher state; the
// methods on *Keyring (String, GoString, Format, LogValue) cover the usual
// case and are nil-safe.
type Keyring struct {
	ring *ring
	// refuseV1 makes Open refuse format 1 values (RefusingFormat1).
	refuseV1 bool
}

// RefusingFormat1 returns a keyring with k's keys whose Open refuses
// format 1 values (ErrFormat1Refused). Once `dispatcher reseal-secrets`
// has re-sealed every value, none is left in format 1, so one found later
// was written back from an old dump or backup by someone who wants a
// value that binds less (a previous signing key swapped for the current
// one); refusing it turns that into an error instead of a signature.
func (k *Keyring) RefusingFormat1() *Keyring {
	if k == nil {
		return nil
	}
	return &Keyring{ring: k.ring, refuseV1: true}
}

type ring struct {
	primary uint32
	aeads   map[uint32]cipher.AEAD
	ids     []uint32 // sorted, for logging
}

// NewKeyring builds a keyring from master keys by id. Each key must be at
// least MinMasterKeyLen bytes; id 0 is reserved (so an unset id can never name
// a real key); primary must be one of the ids. keys is not retained.
func NewKeyring(primary uint32, keys map[uint32][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no master keys", ErrInvalidKeyring)
	}
	r := &ring{primary: primary, aeads: make(map[uint32]cipher.AEAD, len(keys))}
	for id, master := range keys {
		if id == 0 {
			return nil, fmt.Errorf("%w: key id 0 is reserved", ErrInvalidKeyring)
		}
		aead, err := deriveAEAD(master)
		if err != nil {
			return nil, fmt.Errorf("%w: key id %d: %w", ErrInvalidKeyring, id, err)
		}
		r.aeads[id] = aead
		r.ids = append(r.ids, id)
	}
	if _, ok := r.aeads[primary]; !ok {
		return nil, fmt.Errorf("%w: primary key id %d is not in the keyring", ErrInvalidKeyring, primary)
	}
	slices.Sort(r.ids)
	return &Keyring{ring: r}, nil
}

// errShortKey states only the minimum, never the key or its actual length, so
// it is safe in any log.
var errShortKey = fmt.Errorf("master key must be at least %d bytes", MinMasterKeyLen)

func deriveAEAD(master []byte) (cipher.AEAD, error) {
	if len(master) < MinMasterKeyLen {
		return nil, errShortKey
	}
	dataKey, err := hkdf.Key(sha256.New, master, nil, hkdfInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("derive data key: %w", err)
	}
	defer clear(dataKey) // aes.NewCipher expands it; no need to keep a copy
	block, err := aes.NewCipher(dataKey)
	if err != nil {
		return nil, fmt.Errorf("create cipher: %w", err)
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, fmt.Errorf("create AEAD: %w", err)
	}
	return aead, nil
}

// PrimaryID returns the id of the key Seal uses.
func (k *Keyring) PrimaryID() uint32 {
	if k == nil || k.ring == nil {
		return 0
	}
	return k.ring.primary
}

// Seal encrypts plaintext under the primary key. ad is the associated data the
// value is bound to (the endpoint id): Open must be given the same ad.
func (k *Keyring) Seal(plaintext, ad []byte) ([]byte, error) {
	if k == nil || k.ring == nil {
		return nil, ErrNoKeyring
	}
	aead := k.ring.aeads[k.ring.primary]
	out := make([]byte, headerLen, headerLen+gcmOverhead+len(plaintext))
	out[0] = formatV2
	binary.BigEndian.PutUint32(out[1:headerLen], k.ring.primary)
	return aead.Seal(out, nil, plaintext, additionalData(out[:headerLen], ad)), nil
}

// Open decrypts a value produced by Seal with the same ad. It selects the key
// by the id in the header, never by trying keys in turn, so a failure is
// attributable (ErrMalformed, ErrUnknownKey or ErrAuth, matchable with
// errors.Is) and costs one decryption.
func (k *Keyring) Open(sealed, ad []byte) ([]byte, error) {
	if k == nil || k.ring == nil {
		return nil, ErrNoKeyring
	}
	format, id, err := parseHeader(sealed)
	if err != nil {
		return nil, err
	}
	if format == formatV1 && k.refuseV1 {
		return nil, ErrFormat1Refused
	}
	aead, ok := k.ring.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownKey, id)
	}
	plaintext, err := aead.Open(nil, nil, sealed[headerLen:], additionalData(sealed[:headerLen], ad))
	if err != nil {
		// The underlying error says nothing more useful, and "message
		// authentication failed" is all an attacker should learn anyway.
		return nil, fmt.Errorf("%w (key id %d)", ErrAuth, id)
	}
	return plaintext, nil
}

// NeedsReseal reports whether sealed is not already in the current format
// under the primary key, i.e. whether a rotation job should open and re-seal
// it. It is also true for values Open would reject as malformed or of an
// unknown key, so "nothing needs resealing" is a sound precondition for
// removing an old key; such values then surface as errors from Open.
func (k *Keyring) NeedsReseal(sealed []byte) bool {
	format, id, err := parseHeader(sealed)
	return err != nil || int(format) != CurrentFormat || id != k.PrimaryID()
}

// CurrentFormat is the format Seal writes.
const CurrentFormat = int(formatV2)

// FormatOf returns the format of a sealed value (1 or 2), so the caller
// can give Open the associated data that format binds; ErrMalformed if it
// is not a sealed value.
func FormatOf(sealed []byte) (int, error) {
	format, _, err := parseHeader(sealed)
	return int(format), err
}

func parseHeader(sealed []byte) (format byte, id uint32, err error) {
	if len(sealed) < headerLen+gcmOverhead {
		return 0, 0, fmt.Errorf("%w: %d bytes is too short", ErrMalformed, len(sealed))
	}
	if sealed[0] != formatV1 && sealed[0] != formatV2 {
		return 0, 0, fmt.Errorf("%w: unknown format 0x%02x", ErrMalformed, sealed[0])
	}
	return sealed[0], binary.BigEndian.Uint32(sealed[1:headerLen]), nil
}

// additionalData is header ‖ ad. The header has a fixed length, so the
// concatenation is unambiguous without a separator.
func additionalData(header, ad []byte) []byte {
	out := make([]byte, 0, len(header)+len(ad))
	return append(append(out, header...), ad...)
}

// keyIDs returns the primary and all key ids; zero values for a nil or zero
// Keyring, so the printing methods below never panic.
func (k *Keyring) keyIDs() (uint32, []uint32) {
	if k == nil || k.ring == nil {
		return 0, nil
	}
	return k.ring.primary, slices.Clone(k.ring.ids)
}

// String describes the keyring by key ids only.
func (k *Keyring) String() string {
	primary, ids := k.keyIDs()
	if k == nil {
		return "seal.Keyring(nil)"
	}
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return "seal.Keyring{primary: " + strconv.FormatUint(uint64(primary), 10) +
		", keys: [" + strings.Join(texts, " ") + "]}"
}

// GoString keeps %#v from dumping the cipher state.
func (k *Keyring) GoString() string { return k.String() }

// Format makes every fmt verb (%x, %d, %+v, …) print String, so no verb can
// reach the cipher state through reflection.
func (k *Keyring) Format(f fmt.State, _ rune) {
	_, _ = f.Write([]byte(k.String()))
}

// LogValue lets slog log a keyring by its key ids only.
func (k *Keyring) LogValue() slog.Value {
	primary, ids := k.keyIDs()
	return slog.GroupValue(
		slog.Any("primary", primary),
		slog.Any("key_ids", ids),
	)
}

var (
	_ fmt.Stringer   = (*Keyring)(nil)
	_ fmt.GoStringer = (*Keyring)(nil)
	_ fmt.Formatter  = (*Keyring)(nil)
	_ slog.LogValuer = (*Keyring)(nil)
)
