package grpcapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
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

// GetOwnerSettings implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) GetOwnerSettings(ctx context.Context, req *webhooksv1.GetOwnerSettingsRequest) (*webhooksv1.GetOwnerSettingsResponse, error) {
	o, err := s.svc.OwnerSettings(ctx, req.GetOwnerId())
	if err != nil {
		return nil, s.fail(ctx, "get_owner_settings", req.GetOwnerId(), err)
	}
	return &webhooksv1.GetOwnerSettingsResponse{Settings: ownerSettingsProto(o)}, nil
}

// UpdateOwnerSettings implements webhooksv1.EndpointServiceServer.
func (s *endpointServer) UpdateOwnerSettings(ctx context.Context, req *webhooksv1.UpdateOwnerSettingsRequest) (*webhooksv1.UpdateOwnerSettingsResponse, error) {
	o, err := s.svc.UpdateOwnerSettings(ctx, req.GetOwnerId(), req.GetWeight())
	if err != nil {
		return nil, s.fail(ctx, "update_owner_settings", req.GetOwnerId(), err)
	}
	return &webhooksv1.UpdateOwnerSettingsResponse{Settings: ownerSettingsProto(o)}, nil
}

func ownerSettingsProto(o endpoint.OwnerSettings) *webhooksv1.OwnerSettings {
	out := &webhooksv1.OwnerSettings{OwnerId: o.OwnerID, Weight: o.Weight}
	if o.UpdatedAt != nil {
		out.UpdateTime = timestamppb.New(*o.UpdatedAt)
	}
	return out
}
