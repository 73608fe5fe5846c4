package client_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// publisherToken is the publisher token of every dispatcher these tests run.
const publisherToken = "client-test-publisher-token-0123"

// adminToken is their admin token.
const adminToken = "client-test-admin-token-01234567"

// dispatcherAddr is the gRPC address of the dispatcher the examples publish
// to: the real API and ingest on a schema of their own, which TestMain starts
// (examples get no *testing.T to start one with).
var dispatcherAddr string

func TestMain(m *testing.M) { dbtest.VerifyTestMain(withExampleDispatcher{m}) }

type withExampleDispatcher struct{ m *testing.M }

func (w withExampleDispatcher) Run() int {
	stop, err := startExampleDispatcher()
	if err != nil {
		fmt.Fprintln(os.Stderr, "example dispatcher:", err)
		return 1
	}
	defer stop()
	return w.m.Run()
}

func startExampleDispatcher() (func(), error) {
	ctx := context.Background()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), dbtest.LocalURL)
	// Small pools: the suite keeps to about 20 connections (dbtest).
	admCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	admCfg.MaxConns = 1
	adm, err := pgxpool.NewWithConfig(ctx, admCfg)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	// dbtest's prefix and clock, so a crashed run's schema is swept later.
	schema := "t_" + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b[:])
	if _, err := adm.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		adm.Close()
		return nil, err
	}
	pool, srv, err := serveExample(ctx, url, schema)
	return func() {
		if srv != nil {
			srv.Stop()
		}
		if pool != nil {
			pool.Close()
		}
		_, _ = adm.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		adm.Close()
	}, err
}

func serveExample(ctx context.Context, url, schema string) (*pgxpool.Pool, *grpc.Server, error) {
	cfg, err := database.PoolConfig(url, schema)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	if err := database.Migrate(ctx, pool, schema, logger); err != nil {
		return pool, nil, err
	}
	srv, lis, err := newServer(pool, schema, serverOpts{})
	if err != nil {
		return pool, nil, err
	}
	dispatcherAddr = lis.Addr().String()
	return pool, srv, nil
}

// serverOpts varies the EventService a test runs.
type serverOpts struct {
	addr         string // default: a free loopback port
	interceptors []grpc.UnaryServerInterceptor
	tls          *tls.Config
	// decide is the fanout's scope decision; default: the dispatcher's,
	// without an access service.
	decide scope.Func
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
	store := ingest.NewStore(ingest.StoreConfig{Fanout: fanout.NewInline(decide, nil, m)}, pool, riverClient, m, logger)
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
	webhooksv1.RegisterEndpointServiceServer(srv, grpcapi.NewEndpointServer(endpoints, logger))
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
