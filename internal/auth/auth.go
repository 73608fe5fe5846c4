// Package auth holds the API's bearer tokens and the roles they grant.
//
// Two roles exist: a publisher may publish events; an admin may manage
// endpoints (and may also publish). Tokens come from configuration (several
// per role, so a token can be rotated without downtime). Which gRPC method
// needs which role, and the interceptors that enforce it, are the gRPC
// surface's business (internal/grpcapi); RequireHTTP guards the operator's
// HTTP pages with the same tokens.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// MinTokenLen is the shortest token accepted: anything shorter is guessable.
const MinTokenLen = 16

// Role is a set of permissions a token grants.
type Role uint8

// Roles. They are bits so that a token listed under both roles has both.
const (
	RolePublisher Role = 1 << iota
	RoleAdmin
)

func (r Role) String() string {
	var names []string
	if r&RolePublisher != 0 {
		names = append(names, "publisher")
	}
	if r&RoleAdmin != 0 {
		names = append(names, "admin")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// ErrNoTokens is returned by New when no token is configured for any role: a
// server that nobody can call is a misconfiguration, not a locked door.
var ErrNoTokens = errors.New("auth: no API tokens configured (set publisher and/or admin tokens)")

// Tokens holds the configured tokens per role. Several tokens per role are
// allowed so that a new token can be rolled out before the old one is removed.
type Tokens struct {
	Publisher []string
	Admin     []string
}

type entry struct {
	digest [sha256.Size]byte
	role   Role
}

// Authenticator checks bearer tokens and the role a method needs.
type Authenticator struct {
	entries []entry
	logger  *slog.Logger
}

// New builds an Authenticator. Tokens shorter than MinTokenLen are refused; the
// error names the role and position, never the token.
func New(tokens Tokens, logger *slog.Logger) (*Authenticator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{logger: logger}
	add := func(list []string, role Role, name string) error {
		for i, tok := range list {
			if len(tok) < MinTokenLen {
				return fmt.Errorf("auth: %s token #%d is %d characters, need at least %d", name, i+1, len(tok), MinTokenLen)
			}
			// Stored as digests: comparing fixed-size digests keeps the
			// comparison constant-time even across tokens of different length,
			// which subtle.ConstantTimeCompare alone does not.
			a.entries = append(a.entries, entry{digest: sha256.Sum256([]byte(tok)), role: role})
		}
		return nil
	}
	if err := add(tokens.Publisher, RolePublisher, "publisher"); err != nil {
		return nil, err
	}
	if err := add(tokens.Admin, RoleAdmin, "admin"); err != nil {
		return nil, err
	}
	if len(a.entries) == 0 {
		return nil, ErrNoTokens
	}
	return a, nil
}

// RoleOf returns the union of the roles of every configured token equal to
// presented (0 for none). It compares against every token without an early
// exit, so the time taken says nothing about which token (if any) matched.
func (a *Authenticator) RoleOf(presented string) Role {
	d := sha256.Sum256([]byte(presented))
	var role Role
	for _, e := range a.entries {
		eq := subtle.ConstantTimeCompare(d[:], e.digest[:])
		// Branch-free accumulation: mask is all ones when eq == 1.
		role |= e.role & Role(-eq)
	}
	return role
}

// Denied logs a refused call: on which surface ("grpc", "http"), what was
// called, why it was refused, and from where (peer, empty when unknown).
// Never the token.
func (a *Authenticator) Denied(ctx context.Context, surface, target, reason, peer string) {
	attrs := []any{slog.String("method", target), slog.String("reason", reason)}
	if peer != "" {
		attrs = append(attrs, slog.String("peer", peer))
	}
	a.logger.WarnContext(ctx, surface+" call denied", attrs...)
}
