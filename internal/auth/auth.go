// Package auth holds the API's bearer tokens and the roles they grant.
//
// Three roles exist, and they are disjoint (least privilege: whoever holds
// one token can do one job): a publisher may publish events (EventService);
// an admin manages endpoints (EndpointService, what an admin UI's backend
// holds); an operator opens River UI on the ops port and may call nothing on
// the gRPC API. Tokens come from configuration (several per role, so a token
// can be rotated without downtime); one token listed under two roles is a
// configuration error. Which gRPC method needs which role, and the
// interceptors that enforce it, are the gRPC surface's business
// (internal/grpcapi); Sessions logs operators in to the HTTP pages.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// MinTokenLen is the shortest token accepted: a prefix of one character
// and a separator before 16 random bytes in base64url (CheckStrength
// decides the rest).
const MinTokenLen = 1 + 1 + minRandomPartLen

// Role is a set of permissions a token grants.
type Role uint8

// Roles. They are bits so that RoleOf can accumulate without branching; a
// token never holds two (New refuses that).
const (
	RolePublisher Role = 1 << iota
	RoleAdmin
	RoleOperator
)

// roleNames lists every role in a fixed order, for String and New's errors.
var roleNames = []struct {
	role Role
	name string
}{{RolePublisher, "publisher"}, {RoleAdmin, "admin"}, {RoleOperator, "operator"}}

func (r Role) String() string {
	var names []string
	for _, rn := range roleNames {
		if r&rn.role != 0 {
			names = append(names, rn.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// ErrNoTokens is returned by New when no token is configured for any role: a
// server that nobody can call is a misconfiguration, not a locked door.
var ErrNoTokens = errors.New("auth: no API tokens configured (set publisher and/or admin tokens)")

// SharedTokenError is returned by New when one token is listed under two
// roles. Roles are disjoint, so that a token leaked from one client (say the
// admin UI) cannot do another's job (publish events). The error names the
// roles and positions, never the token.
type SharedTokenError struct {
	First, Second Role // First < Second
	FirstIndex    int  // 1-based position in First's list
	SecondIndex   int  // 1-based position in Second's list
}

func (e *SharedTokenError) Error() string {
	return fmt.Sprintf("auth: %s token #%d is also %s token #%d: roles are disjoint, give each role its own tokens",
		e.Second, e.SecondIndex, e.First, e.FirstIndex)
}

// Tokens holds the configured tokens per role. Several tokens per role are
// allowed so that a new token can be rolled out before the old one is removed.
type Tokens struct {
	Publisher []string
	Admin     []string
	Operator  []string
}

type entry struct {
	digest [sha256.Size]byte
	role   Role
	index  int // 1-based position in the role's list, for errors
}

// Authenticator checks bearer tokens and the role a method needs.
type Authenticator struct {
	entries []entry
	logger  *slog.Logger
	denials sampler
}

// New builds an Authenticator. Tokens shorter than MinTokenLen are refused,
// and so are weak ones (CheckStrength) and a token listed under two roles (*SharedTokenError); errors name
// the role and position, never the token. At least one publisher or admin
// token is needed: operator tokens alone leave the API uncallable.
func New(tokens Tokens, logger *slog.Logger) (*Authenticator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{logger: logger, denials: sampler{now: time.Now}}
	add := func(list []string, role Role) error {
		for i, tok := range list {
			if len(tok) < MinTokenLen {
				return fmt.Errorf("auth: %s token #%d is %d characters, need at least %d: %s", role, i+1, len(tok), MinTokenLen, HowToMakeToken)
			}
			if err := CheckStrength(tok); err != nil {
				return fmt.Errorf("auth: %s token #%d: %w", role, i+1, err)
			}
			// Stored as digests: comparing fixed-size digests keeps the
			// comparison constant-time even across tokens of different length,
			// which subtle.ConstantTimeCompare alone does not.
			d := sha256.Sum256([]byte(tok))
			for _, e := range a.entries {
				if e.digest == d && e.role != role {
					return &SharedTokenError{First: e.role, FirstIndex: e.index, Second: role, SecondIndex: i + 1}
				}
			}
			a.entries = append(a.entries, entry{digest: d, role: role, index: i + 1})
		}
		return nil
	}
	for _, l := range []struct {
		list []string
		role Role
	}{{tokens.Publisher, RolePublisher}, {tokens.Admin, RoleAdmin}, {tokens.Operator, RoleOperator}} {
		if err := add(l.list, l.role); err != nil {
			return nil, err
		}
	}
	if len(tokens.Publisher)+len(tokens.Admin) == 0 {
		return nil, ErrNoTokens
	}
	return a, nil
}

// Count returns how many tokens grant role.
func (a *Authenticator) Count(role Role) int {
	n := 0
	for _, e := range a.entries {
		if e.role&role != 0 {
			n++
		}
	}
	return n
}

// RoleOf returns the role of the configured token equal to presented (0 for
// none). It compares against every token without an early
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

// Denial log sampling: at most denialBurst lines per denialWindow, so that
// a flood of bad tokens (a misconfigured client retrying, a guesser) costs a
// few lines, not one per call. The lines dropped are counted, and the next
// line logged says how many.
const (
	denialWindow = 10 * time.Second
	denialBurst  = 5
)

type sampler struct {
	now        func() time.Time
	mu         sync.Mutex
	start      time.Time
	logged     int
	suppressed int
}

// take reports whether to log one more denial now and, if so, how many were
// dropped since the last line logged.
func (s *sampler) take() (suppressed int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.now(); now.Sub(s.start) >= denialWindow {
		s.start, s.logged = now, 0
	}
	if s.logged >= denialBurst {
		s.suppressed++
		return 0, false
	}
	s.logged++
	suppressed, s.suppressed = s.suppressed, 0
	return suppressed, true
}

// Denied logs a refused call: on which surface ("grpc", "http"), what was
// called, why it was refused, and from where (peer, empty when unknown).
// Never the token. Lines are sampled: at most 5 per 10 s, the next logged
// line counting those dropped (suppressed).
func (a *Authenticator) Denied(ctx context.Context, surface, target, reason, peer string) {
	suppressed, ok := a.denials.take()
	if !ok {
		return
	}
	attrs := []any{slog.String("method", target), slog.String("reason", reason)}
	if peer != "" {
		attrs = append(attrs, slog.String("peer", peer))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	a.logger.WarnContext(ctx, surface+" call denied", attrs...)
}
