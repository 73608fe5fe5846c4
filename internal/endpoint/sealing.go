package endpoint

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// The columns a sealed value may sit in, which its associated data names.
const (
	// ColumnSecret is secret_enc: the key an endpoint signs with.
	ColumnSecret = "secret_enc"
	// ColumnPreviousSecret is previous_secret_enc: the key of before a
	// rotation, signing beside the new one during the grace period.
	ColumnPreviousSecret = "previous_secret_enc"
	// ColumnHeaders is headers_enc: the custom header set.
	ColumnHeaders = "headers_enc"
)

// binding is what a sealed value is bound to: its endpoint, the endpoint's
// signing scheme, and its column. A value sealed for one binding fails to
// open for any other (seal.ErrAuth): a previous key copied over the current
// one, an HMAC secret read as a v1a seed after a scheme change written to
// the row, a key moved to another endpoint.
type binding struct {
	id     uuid.UUID
	scheme string // SchemeV1 or SchemeV1a; "" (read as v1) for headers
	column string
}

// keyBinding is the binding of an endpoint's signing key in column; an
// empty scheme reads as SchemeV1, as the column's default.
func keyBinding(id uuid.UUID, scheme, column string) binding {
	if scheme == "" {
		scheme = SchemeV1
	}
	return binding{id: id, scheme: scheme, column: column}
}

// headersBinding is the binding of an endpoint's sealed header set.
func headersBinding(id uuid.UUID) binding { return binding{id: id, column: ColumnHeaders} }

// adV2Label starts format 2's associated data, so that it can never equal
// format 1's (16 bytes of id, possibly followed by "headers").
const adV2Label = "dispatcher/endpoint-sealed/v2\x00"

// ad returns the associated data a value of the given seal format is bound
// with. Format 1 bound signing keys to the endpoint id alone and header sets
// to the id followed by "headers"; format 2 binds the id, the scheme and the
// column, each field length-prefixed so no two bindings share an encoding.
func (b binding) ad(format int) []byte {
	if format == 1 {
		if b.column == ColumnHeaders {
			return append(b.id[:len(b.id):len(b.id)], "headers"...)
		}
		return b.id[:]
	}
	out := make([]byte, 0, len(adV2Label)+len(b.id)+2+len(b.scheme)+len(b.column))
	out = append(out, adV2Label...)
	out = append(out, b.id[:]...)
	out = append(out, byte(len(b.scheme)))
	out = append(out, b.scheme...)
	out = append(out, byte(len(b.column)))
	return append(out, b.column...)
}

// sealFor seals plain for b in the current format.
func sealFor(kr *seal.Keyring, plain []byte, b binding) ([]byte, error) {
	return kr.Seal(plain, b.ad(seal.CurrentFormat))
}

// openFor opens a value sealed for b, in either format.
func openFor(kr *seal.Keyring, sealed []byte, b binding) ([]byte, error) {
	format, err := seal.FormatOf(sealed)
	if err != nil {
		return nil, err
	}
	return kr.Open(sealed, b.ad(format))
}

// moveSealed opens sealed, bound to from, and seals it for to.
func moveSealed(kr *seal.Keyring, sealed []byte, from, to binding) ([]byte, error) {
	plain, err := openFor(kr, sealed, from)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer clear(plain)
	out, err := sealFor(kr, plain, to)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return out, nil
}

// SealSigningKey seals key (an HMAC key, or a v1a Ed25519 seed) for endpoint
// id's column (ColumnSecret or ColumnPreviousSecret) under scheme, as the
// endpoint service does: for tests and tools that write endpoint rows
// directly.
func SealSigningKey(kr *seal.Keyring, id uuid.UUID, scheme, column string, key []byte) ([]byte, error) {
	if column != ColumnSecret && column != ColumnPreviousSecret {
		return nil, fmt.Errorf("seal signing key: %q is not a signing key column", column)
	}
	return sealFor(kr, key, keyBinding(id, scheme, column))
}
