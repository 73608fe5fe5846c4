package seal

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// ParseKeyring builds a keyring from its configuration form:
//
//	id:base64key[,id:base64key...]
//
// The FIRST entry is the primary key; the rest are older keys kept to open
// values sealed before a rotation. Ids are decimal, 1..4294967295, and
// unique. Keys are standard base64 (RFC 4648 §4, padding optional) of at
// least MinMasterKeyLen bytes. Whitespace around entries is ignored, so a
// value read from a file with a trailing newline works.
//
// Errors name the entry by position (1-based) and never include any part of
// the spec: a misplaced separator could turn key material into what looks
// like an id, and configuration errors end up in logs.
func ParseKeyring(spec string) (*Keyring, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: spec is empty", ErrInvalidKeyring)
	}
	entries := strings.Split(spec, ",")
	keys := make(map[uint32][]byte, len(entries))
	position := make(map[uint32]int, len(entries))
	var primary uint32
	defer func() {
		for _, key := range keys {
			clear(key) // the derived AEADs are all the keyring keeps
		}
	}()

	for i, entry := range entries {
		pos := i + 1
		idText, keyText, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok {
			return nil, fmt.Errorf("%w: entry %d: want id:base64key", ErrInvalidKeyring, pos)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(idText), 10, 32)
		if err != nil || id == 0 {
			// err is dropped on purpose: strconv errors quote their input.
			return nil, fmt.Errorf("%w: entry %d: id must be a decimal number from 1 to %d", ErrInvalidKeyring, pos, uint32(1<<32-1))
		}
		if prev, dup := position[uint32(id)]; dup {
			return nil, fmt.Errorf("%w: entry %d: key id %d already used by entry %d", ErrInvalidKeyring, pos, id, prev)
		}
		key, err := decodeKey(strings.TrimSpace(keyText))
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d (key id %d): %w", ErrInvalidKeyring, pos, id, err)
		}
		keys[uint32(id)] = key
		position[uint32(id)] = pos
		if pos == 1 {
			primary = uint32(id)
		}
	}
	return NewKeyring(primary, keys)
}

// errBadBase64 replaces base64's own error, which reports a byte offset into
// the key; harmless, but there is no reason to say anything about the key.
var errBadBase64 = fmt.Errorf("key is not valid standard base64")

func decodeKey(text string) ([]byte, error) {
	enc := base64.StdEncoding
	if !strings.HasSuffix(text, "=") {
		enc = base64.RawStdEncoding
	}
	key, err := enc.DecodeString(text)
	if err != nil {
		return nil, errBadBase64
	}
	if len(key) < MinMasterKeyLen {
		clear(key)
		return nil, errShortKey
	}
	return key, nil
}

// GenerateMasterKey returns a new keyring spec entry, "id:base64key", with 32
// random bytes of key. The id is random too, so an operator generating a key
// for a rotation cannot collide with the key in use (ParseKeyring would
// refuse the duplicate anyway); any unused id may be substituted.
func GenerateMasterKey() (string, error) {
	var buf [4 + MinMasterKeyLen]byte
	defer clear(buf[:])
	var id uint32
	for id == 0 {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("seal: generate master key: %w", err)
		}
		// Keep ids below 2^31 so they also fit a signed 32-bit column or flag.
		id = binary.BigEndian.Uint32(buf[:4]) & 0x7fffffff
	}
	return strconv.FormatUint(uint64(id), 10) + ":" + base64.StdEncoding.EncodeToString(buf[4:]), nil
}
