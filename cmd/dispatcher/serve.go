package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/metric/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/standmeet/webhook-dispatcher/internal/access"
	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/catalogwatch"
	"github.com/standmeet/webhook-dispatcher/internal/connlimit"
	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/delivery"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/fair"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/filter"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/httpapi"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/partition"
	"github.com/standmeet/webhook-dispatcher/internal/portal"
	"github.com/standmeet/webhook-dispatcher/internal/portmux"
	"github.com/standmeet/webhook-dispatcher/internal/retention"
	"github.com/standmeet/webhook-dispatcher/internal/revocation"
	"github.com/standmeet/webhook-dispatcher/internal/riverlevel"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload"
	"github.com/standmeet/webhook-dispatcher/internal/tracing"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServeConfig(args, osEnviron(), stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	slog.SetDefault(logger)
	return serve(ctx, cfg, logger, stdout)
}

// serve is the composition root: config → pools → River → workers → servers.
// It returns when ctx is cancelled (SIGTERM) and everything has stopped.
func serve(ctx context.Context, cfg *serveConfig, logger *slog.Logger, stdout io.Writer) error {
	// The catalog first: everything below decides with it, handed this one
	// Running (a swap replaces it for all of them at once).
	running := event.NewRunning(cfg.Catalog)
	openAPI, err := newServedOpenAPI(running, func(err error) { logger.ErrorContext(ctx, err.Error()) })
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "event catalog", slog.String("source", cfg.Catalog.Source()),
		slog.Int("types", len(cfg.Catalog.Types())), slog.String("digest", cfg.Catalog.Digest()))
	if cfg.UnknownTypes == ingest.UnknownTypesAccept {
		// Chosen, not the default: a misspelt type then goes nowhere with no
		// error, which is worth a line at start-up.
		logger.WarnContext(ctx, "events of types in no event catalog are accepted and dropped, never delivered "+
			"(a misspelt type goes nowhere: Publish answers PUBLISH_OUTCOME_DROPPED_UNKNOWN with a did-you-mean, and the type is counted and logged); "+
			"-unknown-types=refuse (DISPATCHER_UNKNOWN_TYPES=refuse, the default) refuses them instead",
			slog.String("unknown_types", cfg.UnknownTypes.String()))
	}
	keyring, err := seal.ParseKeyring(cfg.MasterKeys)
	if err != nil {
		return fmt.Errorf("DISPATCHER_MASTER_KEYS: %w", err)
	}
	if cfg.RefuseFormat1Secrets {
		// After a fleet-wide reseal-secrets no value is left in format 1;
		// one that appears was written back, and binds less.
		keyring = keyring.RefusingFormat1()
	}
	authn, err := cfg.authenticator(logger)
	if err != nil {
		return err
	}

	traces, err := tracing.Setup(ctx, cfg.Tracing, logger)
	if err != nil {
		return err
	}
	defer func() {
		// Exports the spans still buffered; bounded, so an unreachable
		// collector cannot hold the process up.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := traces.Shutdown(sctx); err != nil {
			logger.Warn("tracing shutdown", slog.Any("error", err))
		}
	}()
	if traces.Enabled() {
		logger.InfoContext(ctx, "tracing on: exporting spans with OTLP", slog.String("protocol", cfg.Tracing.Protocol))
	}

	// This process's id among the replicas (internal/partition), and River's
	// client id, so the others can tell its jobs; its sessions carry it, so
	// they can tell at once when it has died.
	memberID := partition.NewID()
	pool, named, err := database.OpenAs(ctx, cfg.DB.URL, cfg.DB.Schema, int32(cfg.DB.MaxConns), partition.BackendName(memberID))
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.Migrate {
		if err := database.Migrate(ctx, pool, cfg.DB.Schema, logger); err != nil {
			return err
		}
	} else if err := database.CheckMigrated(ctx, pool, cfg.DB.Schema); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	metrics.RegisterRuntime(reg)
	m := metrics.New(reg, metricLabels())
	reg.MustRegister(metrics.NewStateCollector(pool, logger, job.Kinds()))

	for _, c := range plaintextCredentials(cfg) {
		logger.WarnContext(ctx, "credentials go over plaintext to an address off this host: "+c.what,
			slog.String("address", c.addr), slog.String("fix", c.fix))
	}

	// Scope: the one decision, handed to fanout as a function.
	var admitter scope.EmbedAdmitter
	if cfg.AccessAddr != "" {
		client, closer, err := access.Dial(access.Config{
			Addr: cfg.AccessAddr, TLS: cfg.AccessTLS, CAFile: cfg.AccessCAFile,
			Timeout: cfg.AccessTimeout, Token: cfg.AccessToken, Trace: traces.Enabled(),
		})
		if err != nil {
			return fmt.Errorf("access service: %w", err)
		}
		defer closer.Close()
		admitter = client
	} else {
		// The one start-up warning about it: embed-bound endpoints stay
		// silent otherwise, with nothing in the logs to say why.
		logger.WarnContext(ctx, "no access service configured (DISPATCHER_ACCESS_ADDR): endpoints bound to an embed receive no corpus.note.changed events")
	}
	decider := scope.NewDecider(admitter, m, logger).WithCatalog(running)

	// One idle connection per deliver worker and host: every worker may be
	// delivering to endpoints on the same receiver host at once, and a
	// smaller pool would close and re-dial connections all the time.
	httpClient := egress.NewClient(egress.Config{AllowCIDRs: cfg.EgressAllowCIDRs, MaxIdleConnsPerHost: cfg.DeliverWorkers, Proxy: cfg.EgressProxy})
	if len(cfg.EgressAllowCIDRs) > 0 {
		logger.WarnContext(ctx, "egress allow-list overrides the SSRF deny list", slog.Any("cidrs", cfg.EgressAllowCIDRs))
	}
	if p := cfg.EgressProxy; p != nil {
		logger.InfoContext(ctx, "deliveries go through an egress proxy (HTTP CONNECT to each receiver's checked address)",
			slog.String("proxy", p.Addr), slog.Bool("credentials", p.Username != ""))
	}

	// The attempt history, written in batches beside the deliveries.
	attempts := attempt.NewRecorder(attempt.RecorderConfig{BodyBytes: cfg.AttemptBodyBytes, Metrics: m}, pool, logger.With(slog.String("component", "attempts")))
	deliverWorker := delivery.NewWorker(delivery.Config{
		Catalog: running,
		Channel: delivery.LeaseChannel(cfg.DB.Schema), RescueAfter: cfg.RescueStuckAfter, Attempts: attempts, DisableAfter: cfg.DisableAfter,
		OperationalOwner: cfg.OperationalOwner, OperationalChannel: delivery.OperationalChannel(cfg.DB.Schema), Member: memberID,
	},
		pool, httpClient, endpoint.NewKeyOpener(keyring), m, logger)
	if limit := deliverWorker.Timeout(nil); cfg.RescueStuckAfter <= limit {
		return fmt.Errorf("invalid -rescue-stuck-after %s: must exceed the deliver job timeout (%s), or live deliveries would be rescued", cfg.RescueStuckAfter, limit)
	}

	// Spreads deliveries over the processes by endpoint (see
	// internal/partition); its queues are added once River runs. It gives
	// back a dead replica's jobs, and has the deliver worker release the
	// leases of one whose sessions are gone (it is gone with them).
	memberCfg := partition.Config{ID: memberID, Workers: cfg.DeliverWorkers, Hold: cfg.RescueStuckAfter,
		Rescued: func(running, handedOff int) {
			m.JobsRescuedTotal.WithLabelValues(partition.RescuedRunning).Add(float64(running))
			m.JobsRescuedTotal.WithLabelValues(partition.RescuedHandedOff).Add(float64(handedOff))
		},
		Gone: func(ctx context.Context, members []string) error {
			n, err := deliverWorker.ReleaseLeasesOf(ctx, members)
			if n > 0 {
				logger.InfoContext(ctx, "released the endpoint leases of dead replicas", slog.Any("members", members), slog.Int("leases", n))
			}
			return err
		}}
	if named {
		memberCfg.Backend = partition.BackendName(memberID)
	} else {
		logger.InfoContext(ctx, "the database URL sets application_name: other replicas notice this one died only once its heartbeat expires")
	}
	member := partition.New(memberCfg, pool, nil, logger)

	// Endpoint filters are parsed once per process, whichever fanout meets
	// them first; the events they keep back are counted in the endpoint
	// stats beside the attempts.
	filterCache := filter.NewCache(0)
	warnBrokenFilters(ctx, pool, cfg.Catalog, logger)

	workers := river.NewWorkers()
	// One clock for both fanout paths: an owner's lead counts what it
	// enqueues either way.
	fairness := fair.New(fair.Config{})
	river.AddWorker(workers, fanout.NewWorker(pool, decider.Func(), member.Active, m, logger).WithFilters(filterCache, attempts).WithCatalog(running).WithFairness(fairness))
	river.AddWorker(workers, deliverWorker)
	river.AddWorker(workers, retention.NewWorker(pool, logger))

	riverConfig := &river.Config{
		Schema: cfg.DB.Schema,
		ID:     member.ID(),
		Queues: map[string]river.QueueConfig{
			// Deliveries live in partition queues that the member adds and
			// removes.
			job.QueueFanout:      {MaxWorkers: cfg.FanoutWorkers},
			job.QueueMaintenance: {MaxWorkers: 1},
		},
		Workers:    workers,
		Middleware: traces.RiverMiddleware(),
		// River logs at ERROR failures it retries by itself (every loop,
		// while Postgres restarts); riverlevel makes those warnings.
		Logger: slog.New(riverlevel.Handler(logger.Handler())).With(slog.String("component", "river")),
		// A job whose worker died (SIGKILL) is rescued after this; longer
		// than any job's timeout (the deliver worker's is 20 s, checked
		// above). Jobs without a timeout of their own get River's default
		// (1 min) capped by it, as River requires.
		RescueStuckJobsAfter: cfg.RescueStuckAfter,
		JobTimeout:           min(time.Minute, cfg.RescueStuckAfter),
		FetchCooldown:        20 * time.Millisecond,
		FetchPollInterval:    250 * time.Millisecond,
	}
	// Finished jobs are kept no longer than the retention (delivered ones a
	// day, failed ones a week at most), and the prune job runs.
	retention.Configure(riverConfig, cfg.Retention)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), riverConfig)
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}

	// Deliveries fanned out here, to endpoints this process delivers to,
	// go to its deliver worker at once instead of through River's fetch,
	// up to -handoff-limit of them under way (not the deliver workers'
	// count: a burst of PublishBatch calls hands off thousands at once,
	// most of them waiting for their endpoint's turn).
	direct := deliverWorker.NewDirect(delivery.DirectConfig{Works: member.Works, Member: member.ID(), Limit: cfg.HandoffLimit, LimitBytes: int64(cfg.HandoffMemoryMB) << 20, Middleware: traces.RiverMiddleware()})
	store := ingest.NewStore(ingest.StoreConfig{
		Fanout:        fanout.NewInline(decider.Func(), member.Active, m).WithHandoff(direct).WithFilters(filterCache, attempts).WithCatalog(running).WithFairness(fairness),
		UnknownTypes:  cfg.UnknownTypes,
		Catalog:       running,
		GroupInFlight: cfg.IngestTxs,
		GroupLinger:   cfg.IngestLinger,
	}, pool, riverClient, m, logger)

	grpcTLS, err := serverTLS("grpc", tlsreload.Config{CertFile: cfg.GRPCTLSCert, KeyFile: cfg.GRPCTLSKey, ClientCAFile: cfg.GRPCTLSClientCA}, logger)
	if err != nil {
		return err
	}
	opsTLS, err := serverTLS("ops", tlsreload.Config{CertFile: cfg.OpsTLSCert, KeyFile: cfg.OpsTLSKey}, logger)
	if err != nil {
		return err
	}
	opsScheme := "http"
	if opsTLS != nil {
		opsScheme = "https"
	}

	linkTemplate := cfg.JobLinkTemplate
	if linkTemplate == "" && cfg.RiverUI {
		linkTemplate = opsScheme + "://" + cfg.OpsAddr + "/riverui/jobs/{job_id}"
	}
	endpoints := endpoint.NewService(endpoint.ServiceConfig{
		JobLinkTemplate:      linkTemplate,
		RequireHTTPS:         cfg.RequireHTTPS,
		MaxEndpointsPerOwner: cfg.MaxEndpoints,
		AllowCIDRs:           cfg.EgressAllowCIDRs,
		Catalog:              running,
	}, pool, riverClient, keyring, testPublisher{store}, logger)

	// gRPC API.
	// Every call is authenticated before a byte of its request is read (the
	// gate's tap handler, internal/grpcapi), and the requests being read on
	// both faces of the port share one memory budget (internal/inflight).
	throttle := auth.NewThrottle(auth.ThrottleConfig{Failures: cfg.AuthFailures, Per: cfg.AuthFailuresPer})
	readBudget := inflight.New(cfg.APIReadBudget)
	limits := grpcapi.Limits{BatchBytes: cfg.APIMaxBatchBytes, RequestBytes: cfg.APIMaxRequestBytes}
	refused := func(port string) func(reason string) {
		return func(reason string) { m.RefusalsTotal.WithLabelValues(port, reason).Inc() }
	}

	grpcLis, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("gRPC listen on %s: %w", cfg.GRPCAddr, err)
	}
	// Connections of both protocols count: one client address may hold a
	// few, the port many, and those on which nobody has authenticated are
	// kept only briefly (internal/connlimit).
	apiConns := connlimit.Listen(grpcLis, connlimit.Config{
		MaxConns: cfg.APIMaxConns, MaxPerAddress: cfg.APIMaxConnsPerAddr,
		UnauthenticatedTimeout: cfg.UnauthenticatedTimeout, Refused: refused("api"),
		Exempt: cfg.TrustedProxies.Trusted,
	})
	grpcLis = apiConns
	gate := grpcapi.NewGate(grpcapi.GateConfig{Auth: authn, Throttle: throttle, Proxies: cfg.TrustedProxies, Budget: readBudget, Limits: limits,
		Conns: apiConns, Refused: refused("api"), FirstMessageTimeout: cfg.GRPCFirstMessageTimeout})
	// The port's TLS is terminated by the port mux (below), which hands
	// gRPC connections over already secured; these credentials say so.
	serverOpts := []grpc.ServerOption{grpc.Creds(portmux.Creds())}
	serverOpts = append(serverOpts, cfg.grpcConnOptions()...)
	if traces.Enabled() {
		// A server span per call (health checks excepted), the child of the
		// caller's trace when it sends one.
		serverOpts = append(serverOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
			otelgrpc.WithMeterProvider(noop.NewMeterProvider()))))
	}
	serverOpts = append(serverOpts, gate.ServerOptions()...)
	grpcServer := grpc.NewServer(serverOpts...)
	webhooksv1.RegisterEventServiceServer(grpcServer, grpcapi.NewEventServer(store, logger))

	// The owners' portal: pages over the same endpoint service, on the API
	// port; CreatePortalSession makes its links.
	var portalPages *portal.Portal
	endpointOpts := []grpcapi.EndpointServerOption{grpcapi.WithCatalog(running)}
	if cfg.Portal {
		portalPages, err = newPortal(cfg, running, grpcLis.Addr(), grpcTLS != nil, pool, endpoints, keyring, logger)
		if err != nil {
			_ = grpcLis.Close()
			return err
		}
		endpointOpts = append(endpointOpts, grpcapi.WithPortal(portalPages))
	}
	webhooksv1.RegisterEndpointServiceServer(grpcServer, grpcapi.NewEndpointServer(endpoints, logger, endpointOpts...))
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	reflection.Register(grpcServer)

	// One port, two protocols: gRPC, and the HTTP/JSON API transcoded into
	// calls of the same gRPC server over an in-process connection, so both
	// meet the same interceptors, handlers and errors.
	apiMux := portmux.New(grpcLis, grpcTLS)
	apiPipe := portmux.NewPipe()
	apiConn, err := grpc.NewClient("passthrough:///httpapi",
		grpc.WithContextDialer(apiPipe.Dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_ = grpcLis.Close()
		return fmt.Errorf("http api: %w", err)
	}
	defer apiConn.Close()
	apiHandler, err := httpapi.New(ctx, apiConn, httpapi.Config{Auth: authn, Throttle: throttle, Proxies: cfg.TrustedProxies, Budget: readBudget, Limits: limits,
		Refused: refused("api"), OpenAPI: openAPI.Document})
	if err != nil {
		_ = grpcLis.Close()
		return err
	}
	// Bounded like the gRPC side: a client cannot hold a connection open
	// by sending its request slowly, nor keep an idle one for ever.
	apiRoot := apiHandler
	if portalPages != nil {
		root := http.NewServeMux()
		root.Handle("/", apiHandler)
		root.Handle(portal.MountPath, http.StripPrefix(strings.TrimSuffix(portal.MountPath, "/"), portalPages.Handler()))
		// Browsers ask the port for its icon: the portal's, not the API's 401.
		root.Handle("GET /favicon.ico", portalPages.Favicon())
		apiRoot = root
	}
	// A 401 or 403 closes the connection rather than reading the rest of
	// the body to keep it.
	httpServer := &http.Server{Handler: connlimit.CloseOnDenied(apiRoot), ConnContext: connlimit.ConnContext,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		IdleTimeout: cfg.APIIdleTimeout, MaxHeaderBytes: 64 << 10}
	opsLis, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.OpsAddr)
	if err != nil {
		_ = grpcLis.Close()
		return fmt.Errorf("ops listen on %s: %w", cfg.OpsAddr, err)
	}
	opsLis = connlimit.Listen(opsLis, connlimit.Config{
		MaxConns: cfg.OpsMaxConns, MaxPerAddress: cfg.OpsMaxConnsPerAddr,
		UnauthenticatedTimeout: cfg.UnauthenticatedTimeout, Refused: refused("ops"),
		Exempt: cfg.TrustedProxies.Trusted,
	})

	opsMux := http.NewServeMux()
	opsMux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	opsMux.Handle("GET /healthz", newHealthz(pool, cfg.HealthzCache, nil))
	if cfg.Pprof {
		// Off by default: profiles reveal code paths and timing, and the ops
		// port has no authentication of its own for these.
		opsMux.HandleFunc("GET /debug/pprof/", pprof.Index)
		opsMux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		opsMux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		opsMux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		opsMux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	}
	if cfg.RiverUI {
		// Logout is seen by every replica (internal/revocation). Failed
		// logins have a throttle of their own: guesses at the API never
		// throttle an operator's login, nor the reverse.
		loginThrottle := auth.NewThrottle(auth.ThrottleConfig{Failures: cfg.AuthFailures, Per: cfg.AuthFailuresPer})
		pages := auth.PagesConfig{Revocations: revocation.New(pool), Throttle: loginThrottle, Proxies: cfg.TrustedProxies, SecureCookies: cfg.CookieSecure,
			Throttled: func() { refused("ops")(connlimit.ReasonThrottled) }, Authenticated: connlimit.MarkAuthenticated}
		if err := mountRiverUI(ctx, opsMux, riverClient, authn, pages, logger); err != nil {
			_ = grpcLis.Close()
			_ = opsLis.Close()
			return err
		}
		if portalPages != nil {
			// The operator console: every owner's troubled endpoints and
			// the queue, behind River UI's login (its session cookie's
			// path, the same revocations and throttle).
			pages.Role, pages.Prefix = auth.RoleOperator, "/riverui"
			opsMux.Handle(consolePath, authn.Pages(pages).Handler(portalPages.Console(consolePath, "/riverui")))
		}
	}
	// Bounded: a client cannot hold a connection by sending slowly or by
	// keeping it idle, nor send headers without end. No write timeout: a
	// CPU profile (-pprof) takes 30 s to write.
	opsServer := &http.Server{Handler: connlimit.CloseOnDenied(opsMux), ConnContext: connlimit.ConnContext, TLSConfig: opsTLS,
		ReadHeaderTimeout: min(10*time.Second, cfg.OpsReadTimeout), ReadTimeout: cfg.OpsReadTimeout,
		IdleTimeout: cfg.OpsIdleTimeout, MaxHeaderBytes: cfg.OpsMaxHeaderBytes}

	// River gets a context SIGTERM does not cancel: cancelling Start's
	// context would cancel in-flight deliveries at once, while shutdown
	// wants them to finish first (see shutdown).
	if err := riverClient.Start(context.WithoutCancel(ctx)); err != nil {
		_ = grpcLis.Close()
		_ = opsLis.Close()
		return fmt.Errorf("start river: %w", err)
	}
	// The server as a whole ("") and each API service by name, for clients
	// and meshes that check the service they call.
	apiServices := []string{webhooksv1.EventService_ServiceDesc.ServiceName, webhooksv1.EndpointService_ServiceDesc.ServiceName}
	for _, name := range append([]string{""}, apiServices...) {
		healthServer.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}

	warnPlaintext(ctx, logger, grpcLis, grpcTLS, "API bearer tokens (gRPC and HTTP/JSON), and the endpoint signing secrets CreateEndpoint and RotateSecret return,",
		"-grpc-tls-cert/-grpc-tls-key (DISPATCHER_GRPC_TLS_CERT/_KEY)")
	warnPlaintext(ctx, logger, opsLis, opsTLS, "River UI's operator token and session cookie",
		"-ops-tls-cert/-ops-tls-key (DISPATCHER_OPS_TLS_CERT/_KEY)")
	opsPaths := "/metrics /healthz"
	if cfg.RiverUI {
		opsPaths += " /riverui/"
		if portalPages != nil {
			opsPaths += " " + consolePath
		}
	}
	fmt.Fprintf(stdout, "dispatcher serving: grpc=%s ops=%s://%s (%s) schema=%s tokens: publisher=%d admin=%d operator=%d transport: grpc-api=%s ops-port=%s\n",
		grpcLis.Addr(), opsScheme, opsLis.Addr(), opsPaths, cfg.DB.Schema,
		authn.Count(auth.RolePublisher), authn.Count(auth.RoleAdmin), authn.Count(auth.RoleOperator),
		tlsMode(grpcTLS), tlsMode(opsTLS))
	logger.InfoContext(ctx, "dispatcher started", slog.String("grpc_addr", grpcLis.Addr().String()),
		slog.String("ops_addr", opsLis.Addr().String()), slog.String("schema", cfg.DB.Schema))

	g, gctx := errgroup.WithContext(ctx)
	// The API services' health follows the database, as /healthz does.
	g.Go(func() error { followDatabase(gctx, pool, healthServer, apiServices, healthEvery, logger); return nil })
	// Replicas with different catalogs: detected and reported, nothing more.
	catalogs := catalogwatch.New(catalogwatch.Config{}, cfg.Catalog, pool, m, logger)
	g.Go(func() error { catalogs.Run(gctx); return nil })
	// This process's share of the delivery partitions, rebalanced as
	// replicas come and go; on SIGTERM it hands them to the others at once.
	g.Go(func() error { member.Run(gctx, riverClient.Queues()); return nil })
	// The lease listener outlives SIGTERM until River has stopped: in-flight
	// deliveries still hand leases over, and the leases left are released on
	// the way out instead of blocking other replicas until they expire.
	leaseCtx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLeases()
	g.Go(func() error { deliverWorker.Run(leaseCtx); return nil })
	// Stops with the leases, after River: the last attempts are written too.
	g.Go(func() error { attempts.Run(leaseCtx); return nil })
	g.Go(func() error {
		if err := grpcServer.Serve(apiMux.GRPC()); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("gRPC server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := grpcServer.Serve(apiPipe); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("gRPC server (HTTP API): %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := httpServer.Serve(apiMux.HTTP()); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("HTTP API server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := apiMux.Serve(); err != nil {
			return fmt.Errorf("API port: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		serveOps := opsServer.Serve
		if opsTLS != nil {
			serveOps = func(l net.Listener) error { return opsServer.ServeTLS(l, "", "") }
		}
		if err := serveOps(opsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("ops server: %w", err)
		}
		return nil
	})
	if cfg.OutboxURL != "" {
		outboxPool, err := pgxpool.New(ctx, cfg.OutboxURL)
		if err != nil {
			return errors.New("invalid DISPATCHER_OUTBOX_DATABASE_URL: cannot be parsed as a Postgres connection string")
		}
		defer outboxPool.Close()
		relay := ingest.NewRelay(ingest.RelayConfig{
			BatchSize: cfg.OutboxBatch, PollInterval: cfg.OutboxPoll, DeleteRelayed: cfg.OutboxDelete, Table: cfg.OutboxTable,
		}, outboxPool, store, m, logger)
		g.Go(func() error { return relay.Run(gctx) })
	} else {
		logger.InfoContext(ctx, "outbox relay disabled (no DISPATCHER_OUTBOX_DATABASE_URL); events arrive over gRPC only")
	}
	if cfg.OperationalOwner != "" {
		// The deliver worker writes operational events to the dispatcher's
		// own outbox; this relay publishes them like any outbox row. A
		// notification wakes it, so the poll is only a safety net.
		relay := ingest.NewRelay(ingest.RelayConfig{
			PollInterval: 5 * time.Second, DeleteRelayed: true, Table: delivery.OperationalTable,
			Channel: delivery.OperationalChannel(cfg.DB.Schema), Source: ingest.SourceOperational,
		}, pool, store, m, logger.With(slog.String("relay", "operational")))
		g.Go(func() error { return relay.Run(gctx) })
		logger.InfoContext(ctx, "operational events on: endpoint health transitions go to the operational owner",
			slog.String("owner_id", cfg.OperationalOwner))
	}

	// Shutdown: on SIGTERM (ctx) or a server failing (gctx).
	g.Go(func() error {
		<-gctx.Done()
		logger.Info("shutting down")
		healthServer.Shutdown()
		shutdown(grpcServer, httpServer, opsServer, riverClient, direct, cfg.ShutdownTimeout, logger)
		_ = apiMux.Close()
		_ = apiPipe.Close()
		stopLeases()
		return nil
	})
	err = g.Wait()
	logger.Info("dispatcher stopped")
	return err
}

// shutdown stops taking work, lets in-flight deliveries finish for up to
// timeout, then cancels them: River puts a cancelled job back to available
// without spending an attempt, so another process delivers it.
func shutdown(grpcServer *grpc.Server, httpServer, opsServer *http.Server, riverClient *river.Client[pgx.Tx], direct *delivery.Direct, timeout time.Duration, logger *slog.Logger) {
	stopped := make(chan struct{})
	go func() {
		// HTTP first: its requests are gRPC calls, which GracefulStop
		// waits for.
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpServer.Shutdown(hctx)
		grpcServer.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		grpcServer.Stop()
	}

	softCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The direct deliveries (nothing new comes in: the API has stopped)
	// finish or are put back beside River's.
	directStopped := make(chan struct{})
	go func() { direct.Stop(softCtx); close(directStopped) }()
	defer func() { <-directStopped }()
	if err := riverClient.Stop(softCtx); err != nil {
		logger.Warn("in-flight jobs did not finish in time; cancelling them", slog.Duration("timeout", timeout))
		hardCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := riverClient.StopAndCancel(hardCtx); err != nil {
			logger.Error("river did not stop", slog.Any("error", err))
		}
	}

	opsCtx, cancelOps := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelOps()
	_ = opsServer.Shutdown(opsCtx)
}

// testPublisher adapts ingest to the endpoint service's SendTest.
type testPublisher struct{ store *ingest.Store }

func (p testPublisher) Publish(ctx context.Context, e *webhook.Event) error {
	_, err := p.store.Ingest(ctx, ingest.SourceTest, []*webhook.Event{e})
	return err
}

// metricLabels gathers the label values each package emits, so that every
// series exists at 0 from the first scrape.
func metricLabels() metrics.Labels {
	return metrics.Labels{
		DeliveryOutcomes: delivery.Outcomes(),
		StatusClasses:    delivery.StatusClasses(),
		SnoozeReasons:    job.SnoozeReasons(),
		PauseReasons:     delivery.PauseReasons(),
		ScopeRules:       scope.Rules(),
		ScopeResults:     scope.Results(),
		IngestPaths:      ingest.Paths(),
		IngestResults:    ingest.Results(),
		RescueKinds:      partition.RescueKinds(),
		RefusalPorts:     connlimit.Ports(),
		RefusalReasons:   connlimit.Reasons(),
	}
}

// consolePath is the operator console's place on the ops port: under River
// UI's prefix, so that River UI's login session opens it.
const consolePath = "/riverui/console/"

// newPortal builds the owners' portal. Without a configured public URL its
// links name the API's own address, which serves a browser on this machine
// or network; behind a proxy, set -portal-url.
func newPortal(cfg *serveConfig, running *event.Running, apiAddr net.Addr, tls bool, pool *pgxpool.Pool, svc *endpoint.Service, keyring *seal.Keyring, logger *slog.Logger) (*portal.Portal, error) {
	raw := cfg.PortalURL
	if raw == "" {
		scheme := "http"
		if tls {
			scheme = "https"
		}
		raw = scheme + "://" + apiAddr.String() + portal.MountPath
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid -portal-url %q: must be an absolute http(s) URL, like https://hooks.example.com/portal/", raw)
	}
	pc := portal.Config{Catalog: running, PublicURL: u, SecureCookie: cfg.CookieSecure, Keyring: keyring, ReturnURL: cfg.PortalReturnURL,
		Branding: portal.Branding{ProductName: cfg.PortalProductName, AccentColor: cfg.PortalAccentColor}}
	if cfg.PortalLogo != "" {
		b, err := os.ReadFile(cfg.PortalLogo)
		if err != nil {
			return nil, fmt.Errorf("invalid -portal-logo (DISPATCHER_PORTAL_LOGO): %w", err)
		}
		if pc.Logo, err = portal.ValidateLogo(b); err != nil {
			return nil, fmt.Errorf("invalid -portal-logo (DISPATCHER_PORTAL_LOGO) %q: %w", cfg.PortalLogo, err)
		}
	}
	return portal.New(pc, pool, svc, logger.With(slog.String("component", "portal")))
}
