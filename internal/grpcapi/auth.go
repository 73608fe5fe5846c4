package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/portmux"
)

// Method prefixes, as gRPC spells full method names.
const (
	prefixEventService    = "/webhooks.v1.EventService/"
	prefixEndpointService = "/webhooks.v1.EndpointService/"
	prefixHealth          = "/grpc.health.v1.Health/"
	prefixReflection      = "/grpc.reflection."
)

// required returns the role a method needs, or open=true when it needs none:
// health and reflection stay open so probes and grpcurl work without
// credentials. The operator role opens nothing here (it is for River UI).
// ok=false means no rule covers the method, and it is denied: a
// service added later is closed until someone decides who may call it.
func required(fullMethod string) (need auth.Role, open, ok bool) {
	switch {
	case strings.HasPrefix(fullMethod, prefixHealth), strings.HasPrefix(fullMethod, prefixReflection):
		return 0, true, true
	case strings.HasPrefix(fullMethod, prefixEventService):
		// Only the publisher: an admin token (held by an admin UI's
		// backend) must not forge domain events for any owner.
		return auth.RolePublisher, false, true
	case strings.HasPrefix(fullMethod, prefixEndpointService):
		return auth.RoleAdmin, false, true
	default:
		return 0, false, false
	}
}

// bearer extracts the token from the authorization metadata
// ("authorization: Bearer <token>").
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
func Authorize(ctx context.Context, a *auth.Authenticator, fullMethod string) error {
	need, open, ok := required(fullMethod)
	if open {
		return nil
	}
	tok, present := bearer(ctx)
	if !present {
		a.Denied(ctx, "grpc", fullMethod, "missing bearer token", caller(ctx))
		return status.Error(codes.Unauthenticated, "missing bearer token: send metadata \"authorization: Bearer <token>\"")
	}
	role := a.RoleOf(tok)
	if role == 0 {
		a.Denied(ctx, "grpc", fullMethod, "unknown token", caller(ctx))
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if !ok || role&need == 0 {
		a.Denied(ctx, "grpc", fullMethod, "role "+role.String()+" not allowed", caller(ctx))
		return status.Errorf(codes.PermissionDenied, "token role %s may not call %s", role, fullMethod)
	}
	return nil
}

// caller names who made a call, for a refusal's log line: its peer, or for
// a call of the HTTP API the client grpc-gateway names. Only a refusal asks,
// so an allowed call does not pay for the formatting.
func caller(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if p.Addr.Network() == portmux.PipeNetwork {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if xff := md.Get("x-forwarded-for"); len(xff) > 0 {
				return xff[len(xff)-1] + " (HTTP)"
			}
		}
	}
	return p.Addr.String()
}
