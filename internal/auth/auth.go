// Package auth guards the gRPC API with bearer tokens per role.
//
// Two roles exist: a publisher may call webhooks.v1.EventService (Publish,
// PublishBatch); an admin may call webhooks.v1.EndpointService and may also
// publish. Tokens come from configuration (several per role, so a token can be
// rotated without downtime) and are presented as gRPC metadata
// "authorization: Bearer <token>". Health and reflection stay open so probes
// and grpcurl work without credentials; every other method is denied unless a
// rule below names it, so a service added later is closed until someone
// decides who may call it.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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

// Method prefixes, as gRPC spells full method names.
const (
	prefixEventService    = "/webhooks.v1.EventService/"
	prefixEndpointService = "/webhooks.v1.EndpointService/"
	prefixHealth          = "/grpc.health.v1.Health/"
	prefixReflection      = "/grpc.reflection."
)

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

// required returns the role a method needs, or open=true when it needs none.
// ok=false means no rule covers the method: deny by default.
func required(fullMethod string) (need Role, open, ok bool) {
	switch {
	case strings.HasPrefix(fullMethod, prefixHealth), strings.HasPrefix(fullMethod, prefixReflection):
		return 0, true, true
	case strings.HasPrefix(fullMethod, prefixEventService):
		// An admin may publish too (e.g. the admin UI sending a manual event).
		return RolePublisher | RoleAdmin, false, true
	case strings.HasPrefix(fullMethod, prefixEndpointService):
		return RoleAdmin, false, true
	default:
		return 0, false, false
	}
}

// roleOf returns the union of the roles of every configured token equal to
// presented. It compares against every token without an early exit, so the
// time taken says nothing about which token (if any) matched.
func (a *Authenticator) roleOf(presented string) Role {
	d := sha256.Sum256([]byte(presented))
	var role Role
	for _, e := range a.entries {
		eq := subtle.ConstantTimeCompare(d[:], e.digest[:])
		// Branch-free accumulation: mask is all ones when eq == 1.
		role |= e.role & Role(-eq)
	}
	return role
}

// bearer extracts the token from the authorization metadata.
func bearer(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	vals := md.Get("authorization")
	if len(vals) != 1 {
		// Zero is missing; several are ambiguous, and guessing which one
		// counts would invite confusion between proxies and the server.
		return "", false
	}
	scheme, tok, found := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Authorize decides whether the caller in ctx may call fullMethod. The error
// is a gRPC status: Unauthenticated for a missing or unknown token,
// PermissionDenied for a known token without the needed role (or a method no
// rule covers).
func (a *Authenticator) Authorize(ctx context.Context, fullMethod string) error {
	need, open, ok := required(fullMethod)
	if open {
		return nil
	}
	tok, present := bearer(ctx)
	if !present {
		a.deny(ctx, fullMethod, "missing bearer token")
		return status.Error(codes.Unauthenticated, "missing bearer token: send metadata \"authorization: Bearer <token>\"")
	}
	role := a.roleOf(tok)
	if role == 0 {
		a.deny(ctx, fullMethod, "unknown token")
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if !ok || role&need == 0 {
		a.deny(ctx, fullMethod, "role "+role.String()+" not allowed")
		return status.Errorf(codes.PermissionDenied, "token role %s may not call %s", role, fullMethod)
	}
	return nil
}

func (a *Authenticator) deny(ctx context.Context, fullMethod, reason string) {
	attrs := []any{slog.String("method", fullMethod), slog.String("reason", reason)}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	a.logger.WarnContext(ctx, "grpc call denied", attrs...)
}

// UnaryInterceptor enforces Authorize on unary calls.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.Authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor enforces Authorize on streaming calls (reflection is one).
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.Authorize(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions returns both interceptors as server options, for callers that
// install no other interceptors. Callers that chain their own should use
// grpc.ChainUnaryInterceptor with UnaryInterceptor instead.
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamInterceptor()),
	}
}
