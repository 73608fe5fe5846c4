// These are pkg/client's tests against the real dispatcher API (internal/grpcapi over
// the real ingest and endpoint services, on a fresh schema of the test
// database). They live in the dispatcher's module, not in
// pkg/, because pkg/ is a module of its own: it cannot import internal/, and
// its users must not download the dispatcher's test dependencies.

package clienttest_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"log/slog"
	"net"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/portal"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// publisherToken is the publisher token of every dispatcher these tests run.
const publisherToken = "client-test-publisher-token-0123"

// adminToken is their admin token.
const adminToken = "client-test-admin-token-01234567"

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

// serverOpts varies the EventService a test runs.
type serverOpts struct {
	addr         string // default: a free loopback port
	interceptors []grpc.UnaryServerInterceptor
	tls          *tls.Config
	// decide is the fanout's scope decision; default: the dispatcher's,
	// without an access service.
	decide scope.Func
	// portalURL, when set, serves CreatePortalSession with a portal of
	// that public URL.
	portalURL string
}

// newServer serves the dispatcher's EventService (grpcapi over a real ingest
// store with an insert-only River client) on a loopback socket, with the
// interceptors given in front of the auth ones.
func newServer(pool *pgxpool.Pool, schema string, o serverOpts) (*grpc.Server, net.Listener, error) {
	logger := slog.New(slog.DiscardHandler)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, Schema: schema})
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	decide := o.decide
	if decide == nil {
		decide = scope.NewDecider(nil, m, logger).Func()
	}
	// Unknown types refused, as the dispatcher does by default.
	store := ingest.NewStore(ingest.StoreConfig{Fanout: fanout.NewInline(decide, nil, m), UnknownTypes: ingest.UnknownTypesRefuse}, pool, riverClient, m, logger)
	authn, err := auth.New(auth.Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken}}, logger)
	if err != nil {
		return nil, nil, err
	}
	keyring, err := seal.ParseKeyring("1:" + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil {
		return nil, nil, err
	}
	endpoints := endpoint.NewService(endpoint.ServiceConfig{}, pool, riverClient, keyring, storePublisher{store}, logger)
	lis, err := new(net.ListenConfig).Listen(context.Background(), "tcp", cmp.Or(o.addr, "127.0.0.1:0"))
	if err != nil {
		return nil, nil, err
	}
	serverOpts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(o.interceptors...)}
	if o.tls != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(o.tls)))
	}
	srv := grpc.NewServer(append(serverOpts, grpcapi.ServerOptions(authn)...)...)
	webhooksv1.RegisterEventServiceServer(srv, grpcapi.NewEventServer(store, logger))
	var endpointOpts []grpcapi.EndpointServerOption
	if o.portalURL != "" {
		u, err := url.Parse(o.portalURL)
		if err != nil {
			return nil, nil, err
		}
		p, err := portal.New(portal.Config{PublicURL: u, Keyring: keyring}, pool, endpoints, logger)
		if err != nil {
			return nil, nil, err
		}
		endpointOpts = append(endpointOpts, grpcapi.WithPortal(p))
	}
	webhooksv1.RegisterEndpointServiceServer(srv, grpcapi.NewEndpointServer(endpoints, logger, endpointOpts...))
	go func() { _ = srv.Serve(lis) }()
	return srv, lis, nil
}

// storePublisher is SendTest's way into ingest, as the composition root
// wires it.
type storePublisher struct{ store *ingest.Store }

func (p storePublisher) Publish(ctx context.Context, e *webhook.Event) error {
	_, err := p.store.Ingest(ctx, ingest.SourceTest, []*webhook.Event{e})
	return err
}
