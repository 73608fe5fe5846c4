package grpcapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/portal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// PortalSessions makes the portal's one-time links (internal/portal).
type PortalSessions interface {
	CreateSession(ctx context.Context, r portal.SessionRequest) (portal.Link, error)
}

// EndpointServerOption configures NewEndpointServer.
type EndpointServerOption func(*endpointServer)

// WithPortal serves CreatePortalSession with p; without it the call is
// UNIMPLEMENTED.
func WithPortal(p PortalSessions) EndpointServerOption {
	return func(s *endpointServer) { s.portal = p }
}

var portalAccess = map[webhooksv1.PortalAccess]portal.Access{
	webhooksv1.PortalAccess_PORTAL_ACCESS_READ:   portal.AccessRead,
	webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE: portal.AccessManage,
}

// CreatePortalSession implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) CreatePortalSession(ctx context.Context, req *webhooksv1.CreatePortalSessionRequest) (*webhooksv1.CreatePortalSessionResponse, error) {
	if s.portal == nil {
		return nil, status.Error(codes.Unimplemented, "the portal is off on this server")
	}
	r := portal.SessionRequest{OwnerID: req.GetOwnerId(), AllowedOrigins: req.GetAllowedOrigins(),
		DisplayName: req.GetDisplayName(), ReturnURL: req.GetReturnUrl(), Confirm: req.GetConfirm(),
		Branding: portal.Branding{ProductName: req.GetBranding().GetProductName(), AccentColor: req.GetBranding().GetAccentColor()}}
	if ttl := req.GetTtl(); ttl != nil {
		if ttl.CheckValid() != nil {
			r.TTLMalformed = true
		} else {
			r.TTL = ttl.AsDuration()
		}
	}
	if a := req.GetAccess(); a != webhooksv1.PortalAccess_PORTAL_ACCESS_UNSPECIFIED {
		r.Access = portalAccess[a]
		if r.Access == "" {
			r.Access = "unknown"
		}
	}
	link, err := s.portal.CreateSession(ctx, r)
	if err != nil {
		return nil, s.fail(ctx, "create_portal_session", req.GetOwnerId(), err)
	}
	return &webhooksv1.CreatePortalSessionResponse{Url: link.URL, ExpiresAt: timestamppb.New(link.ExpiresAt)}, nil
}
