package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/delivery"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/portal"
	"github.com/standmeet/webhook-dispatcher/internal/retention"
	"github.com/standmeet/webhook-dispatcher/internal/tracing"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// DefaultDatabaseURL is the local server used when nothing is configured.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// DefaultHandoffLimit and MaxHandoffLimit bound -handoff-limit. A handed-off
// delivery costs Postgres two writes of its job row instead of River's three
// and its fetch, so the limit is set to take a burst (S1: four PublishBatch
// calls of 1,000 deliveries at once) rather than the deliver workers' 200;
// what bounds it is memory, about 15 kB per delivery waiting for its
// endpoint's turn (docs/operations.md). Every handed-off run ends within the
// deliver job's timeout whatever the limit (it snoozes if its turn does not
// come within the lane's wait), so its outcome is written long before its
// hold (-rescue-stuck-after, which must exceed that timeout) ends.
const (
	DefaultHandoffLimit = 2000
	MaxHandoffLimit     = 20000
)

// DefaultHandoffMemoryMB and MaxHandoffMemoryMB bound -handoff-memory-mb,
// the same deliveries' bound by memory (internal/delivery's
// DeliveryBytes: a fixed 16 kB each plus its event's bytes): 16 MB is
// about 1,000 deliveries of small events, whichever of the two bounds is
// reached first.
const (
	DefaultHandoffMemoryMB = delivery.DefaultHandoffBytes >> 20
	MaxHandoffMemoryMB     = 4096
)

// dbConfig is shared by every command that talks to Postgres directly.
type dbConfig struct {
	URL      string
	Schema   string
	MaxConns int
}

func (c *dbConfig) bind(fs *flag.FlagSet, env *environ) {
	fs.StringVar(&c.URL, "database-url", env.str("DATABASE_URL", env.str("DISPATCHER_DATABASE_URL", DefaultDatabaseURL)),
		"Postgres URL of the dispatcher's database (env DATABASE_URL or DISPATCHER_DATABASE_URL)")
	fs.StringVar(&c.Schema, "schema", env.str("DISPATCHER_SCHEMA", database.DefaultSchema),
		"Postgres schema holding the dispatcher's and River's tables (env DISPATCHER_SCHEMA)")
	fs.IntVar(&c.MaxConns, "db-max-conns", env.integer("DISPATCHER_DB_MAX_CONNS", 40),
		"maximum connections in the dispatcher's pool (env DISPATCHER_DB_MAX_CONNS)")
}

// serveConfig is everything `dispatcher serve` reads.
type serveConfig struct {
	DB dbConfig

	Migrate bool

	GRPCAddr    string
	GRPCTLSCert string
	GRPCTLSKey  string
	// GRPCTLSClientCA turns on mutual TLS on the gRPC API.
	GRPCTLSClientCA string
	OpsAddr         string
	OpsTLSCert      string
	OpsTLSKey       string

	// Secrets: environment or files only, never flags.
	MasterKeys         string
	PublisherTokens    string
	AdminTokens        string
	OperatorTokens     string
	PublisherTokenFile string
	AdminTokenFile     string
	OperatorTokenFile  string

	OutboxURL    string
	OutboxBatch  int
	OutboxPoll   time.Duration
	OutboxDelete bool
	OutboxTable  string
	// Catalog is the event catalog: loaded from -catalog, else the default.
	Catalog *catalog.Catalog
	// UnknownTypes: refuse (the default) or accept (and drop) events of types
	// in no catalog.
	UnknownTypes     ingest.UnknownTypes
	EgressAllowCIDRs []netip.Prefix
	// EgressProxy tunnels every delivery through an HTTP CONNECT proxy.
	EgressProxy  *egress.Proxy
	RequireHTTPS bool
	MaxEndpoints int

	AccessAddr    string
	AccessTLS     bool
	AccessCAFile  string
	AccessTimeout time.Duration
	AccessToken   string

	DeliverWorkers int
	// HandoffLimit bounds the deliveries handed off (internal/delivery's
	// Direct) and not yet done at once; beyond it they go through River.
	HandoffLimit int
	// HandoffMemoryMB bounds the same deliveries by the memory they hold.
	HandoffMemoryMB int
	FanoutWorkers   int
	// IngestTxs bounds the ingest transactions running at once
	// (internal/ingest's group commit).
	IngestTxs int
	// IngestLinger is ingest.StoreConfig.GroupLinger.
	IngestLinger     time.Duration
	ShutdownTimeout  time.Duration
	RescueStuckAfter time.Duration
	Retention        time.Duration
	// AttemptBodyBytes: how much of each response body the attempt history keeps.
	AttemptBodyBytes int
	// DisableAfter: how long an endpoint may fail continuously before it is disabled.
	DisableAfter time.Duration
	// OperationalOwner: the owner id operational events go to; "" sends none.
	OperationalOwner string
	JobLinkTemplate  string
	RiverUI          bool
	Pprof            bool
	// Portal serves the owners' web pages under /portal/ on the API port;
	// PortalURL is their address as browsers reach it ("": derived from
	// the API listen address). CookieSecure forces its cookie Secure too.
	Portal    bool
	PortalURL string
	// The portal's branding for every session (sessions may override the
	// name and the accent), its logo file and the way back to the
	// application for sessions that name none.
	PortalProductName string
	PortalAccentColor string
	PortalLogo        string
	PortalReturnURL   string

	// API port limits (both protocols unless named).
	APIMaxConns int
	// APIMaxConnsPerAddr bounds one client address's connections.
	APIMaxConnsPerAddr int
	// UnauthenticatedTimeout bounds how long a connection of either port
	// that has not authenticated may be idle or take to send a request.
	UnauthenticatedTimeout time.Duration
	APIIdleTimeout         time.Duration
	APIMaxBatchBytes       int
	APIMaxRequestBytes     int
	APIReadBudget          int64
	GRPCMaxStreams         int
	GRPCMaxConnAge         time.Duration
	GRPCMaxConnGrace       time.Duration
	GRPCKeepaliveMin       time.Duration
	// GRPCFirstMessageTimeout bounds how long a gRPC call that needs no
	// token (health, reflection) may take to send its first message.
	GRPCFirstMessageTimeout time.Duration
	// Ops port limits.
	OpsMaxConns        int
	OpsMaxConnsPerAddr int
	OpsReadTimeout     time.Duration
	OpsIdleTimeout     time.Duration
	OpsMaxHeaderBytes  int
	HealthzCache       time.Duration
	// Failed tokens per client address (login form and bearer tokens).
	AuthFailures    int
	AuthFailuresPer time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For or
	// Forwarded headers name the client address the throttle counts; they
	// are exempt from the per-address connection caps.
	TrustedProxies auth.Proxies
	// CookieSecure marks the session cookies of River UI and the portal
	// Secure even when this process serves plain HTTP (behind a
	// TLS-terminating proxy).
	CookieSecure bool
	// RefuseFormat1Secrets refuses format 1 sealed values (internal/seal).
	RefuseFormat1Secrets bool

	LogFormat string
	LogLevel  slog.Level

	// Tracing is read from the standard OTEL_* variables (internal/tracing).
	Tracing tracing.Config
}

func parseServeConfig(args []string, env *environ, output io.Writer) (*serveConfig, error) {
	c := &serveConfig{}
	fs := newFlagSet("serve", output)
	c.DB.bind(fs, env)
	fs.BoolVar(&c.Migrate, "migrate", env.boolean("DISPATCHER_MIGRATE", false), "apply migrations at start-up instead of refusing an unmigrated database (env DISPATCHER_MIGRATE)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", env.str("DISPATCHER_GRPC_ADDR", "127.0.0.1:7070"), "gRPC API listen address (env DISPATCHER_GRPC_ADDR)")
	fs.StringVar(&c.GRPCTLSCert, "grpc-tls-cert", env.get("DISPATCHER_GRPC_TLS_CERT"), "TLS certificate file for the gRPC API; with -grpc-tls-key enables TLS, re-read when it changes (env DISPATCHER_GRPC_TLS_CERT)")
	fs.StringVar(&c.GRPCTLSKey, "grpc-tls-key", env.get("DISPATCHER_GRPC_TLS_KEY"), "TLS key file for the gRPC API (env DISPATCHER_GRPC_TLS_KEY)")
	fs.StringVar(&c.GRPCTLSClientCA, "grpc-tls-client-ca", env.get("DISPATCHER_GRPC_TLS_CLIENT_CA"), "PEM CA bundle: when set, gRPC clients must present a certificate signed by one of these CAs (mutual TLS); needs -grpc-tls-cert (env DISPATCHER_GRPC_TLS_CLIENT_CA)")
	fs.StringVar(&c.OpsTLSCert, "ops-tls-cert", env.get("DISPATCHER_OPS_TLS_CERT"), "TLS certificate file for the ops port (River UI, metrics); with -ops-tls-key enables HTTPS, re-read when it changes (env DISPATCHER_OPS_TLS_CERT)")
	fs.StringVar(&c.OpsTLSKey, "ops-tls-key", env.get("DISPATCHER_OPS_TLS_KEY"), "TLS key file for the ops port (env DISPATCHER_OPS_TLS_KEY)")
	fs.StringVar(&c.OpsAddr, "ops-addr", env.str("DISPATCHER_OPS_ADDR", "127.0.0.1:9090"), "operator HTTP listen address: /metrics, /healthz, /riverui/ (env DISPATCHER_OPS_ADDR)")
	fs.StringVar(&c.PublisherTokenFile, "publisher-token-file", env.get("DISPATCHER_PUBLISHER_TOKEN_FILE"), "file of publisher tokens, one per line (env DISPATCHER_PUBLISHER_TOKEN_FILE)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", env.get("DISPATCHER_ADMIN_TOKEN_FILE"), "file of admin tokens, one per line (env DISPATCHER_ADMIN_TOKEN_FILE)")
	fs.StringVar(&c.OperatorTokenFile, "operator-token-file", env.get("DISPATCHER_OPERATOR_TOKEN_FILE"), "file of operator tokens (River UI login), one per line (env DISPATCHER_OPERATOR_TOKEN_FILE)")
	fs.StringVar(&c.OutboxURL, "outbox-database-url", env.get("DISPATCHER_OUTBOX_DATABASE_URL"), "Postgres URL of the main app's database holding webhook_outbox; empty disables the relay (env DISPATCHER_OUTBOX_DATABASE_URL)")
	fs.IntVar(&c.OutboxBatch, "outbox-batch", env.integer("DISPATCHER_OUTBOX_BATCH", 500), "outbox rows claimed per batch (env DISPATCHER_OUTBOX_BATCH)")
	fs.DurationVar(&c.OutboxPoll, "outbox-poll", env.duration("DISPATCHER_OUTBOX_POLL", time.Second), "outbox poll interval when no NOTIFY arrives (env DISPATCHER_OUTBOX_POLL)")
	fs.StringVar(&c.OutboxTable, "outbox-table", env.str("DISPATCHER_OUTBOX_TABLE", ingest.DefaultOutboxTable), "the outbox table in the main app's database, optionally schema-qualified; the same name pkg/outbox.Table gives the writer (env DISPATCHER_OUTBOX_TABLE)")
	fs.BoolVar(&c.OutboxDelete, "outbox-delete", env.boolean("DISPATCHER_OUTBOX_DELETE", false), "delete relayed outbox rows instead of marking them (env DISPATCHER_OUTBOX_DELETE)")
	catalogPath := fs.String("catalog", env.get("DISPATCHER_CATALOG"), "the event catalog: a directory of <type>.json files or one JSON file {\"types\": [...]}; empty: the embedded default (the 39 types of docs/events.md); every replica needs the same one (env DISPATCHER_CATALOG)")
	unknownTypes := fs.String("unknown-types", env.str("DISPATCHER_UNKNOWN_TYPES", "refuse"), "what to do with an event whose type is in no event catalog: refuse (InvalidArgument naming event.type with a did-you-mean, HTTP 400; an outbox row is set aside with that reason) or accept (it is dropped, never delivered, counted and logged; Publish answers PUBLISH_OUTCOME_DROPPED_UNKNOWN) (env DISPATCHER_UNKNOWN_TYPES)")
	allow := fs.String("egress-allow-cidrs", env.get("DISPATCHER_EGRESS_ALLOW_CIDRS"), "comma-separated CIDRs receivers may use despite the SSRF deny list, e.g. 127.0.0.0/8 for local development; empty in production (env DISPATCHER_EGRESS_ALLOW_CIDRS)")
	proxy := fs.String("egress-proxy", env.get("DISPATCHER_EGRESS_PROXY"), "http://host:port of an HTTP CONNECT proxy every delivery goes through (receivers that admit only known source addresses); the SSRF guard still checks each receiver's address (env DISPATCHER_EGRESS_PROXY)")
	proxyCreds := fs.String("egress-proxy-credentials-file", env.get("DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE"), "file holding the proxy's user:password on one line, sent as Proxy-Authorization (env DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE)")
	fs.BoolVar(&c.RequireHTTPS, "require-https", env.boolean("DISPATCHER_REQUIRE_HTTPS", false), "refuse endpoint URLs that are not https (env DISPATCHER_REQUIRE_HTTPS)")
	fs.IntVar(&c.MaxEndpoints, "max-endpoints-per-owner", env.integer("DISPATCHER_MAX_ENDPOINTS_PER_OWNER", 100), "endpoints one owner may have; -1 for no limit (env DISPATCHER_MAX_ENDPOINTS_PER_OWNER)")
	fs.StringVar(&c.AccessAddr, "access-addr", env.get("DISPATCHER_ACCESS_ADDR"), "address of the access service (EmbedAdmits); empty: embed-bound endpoints receive nothing scoped (env DISPATCHER_ACCESS_ADDR)")
	fs.BoolVar(&c.AccessTLS, "access-tls", env.boolean("DISPATCHER_ACCESS_TLS", false), "use TLS to the access service (env DISPATCHER_ACCESS_TLS)")
	fs.StringVar(&c.AccessCAFile, "access-ca-file", env.get("DISPATCHER_ACCESS_CA_FILE"), "CA bundle for the access service (env DISPATCHER_ACCESS_CA_FILE)")
	fs.DurationVar(&c.AccessTimeout, "access-timeout", env.duration("DISPATCHER_ACCESS_TIMEOUT", 2*time.Second), "timeout of one EmbedAdmits call (env DISPATCHER_ACCESS_TIMEOUT)")
	fs.IntVar(&c.DeliverWorkers, "deliver-workers", env.integer("DISPATCHER_DELIVER_WORKERS", 200), "concurrent deliveries per process (env DISPATCHER_DELIVER_WORKERS)")
	fs.IntVar(&c.HandoffLimit, "handoff-limit", env.integer("DISPATCHER_HANDOFF_LIMIT", DefaultHandoffLimit), "deliveries handed off directly (started by this process without River's fetch) and not yet done, at most, including those waiting for their endpoint's turn; beyond it new deliveries go through River (env DISPATCHER_HANDOFF_LIMIT)")
	fs.IntVar(&c.HandoffMemoryMB, "handoff-memory-mb", env.integer("DISPATCHER_HANDOFF_MEMORY_MB", DefaultHandoffMemoryMB), "memory the deliveries handed off and not yet done may hold, at most, in MB (16 kB each plus their event's bytes); beyond it new deliveries go through River (env DISPATCHER_HANDOFF_MEMORY_MB)")
	fs.IntVar(&c.FanoutWorkers, "fanout-workers", env.integer("DISPATCHER_FANOUT_WORKERS", 20), "concurrent fanouts per process (env DISPATCHER_FANOUT_WORKERS)")
	fs.IntVar(&c.IngestTxs, "ingest-transactions", env.integer("DISPATCHER_INGEST_TRANSACTIONS", ingest.DefaultGroupInFlight),
		"ingest transactions at once; events published meanwhile share the next one (env DISPATCHER_INGEST_TRANSACTIONS)")
	fs.DurationVar(&c.IngestLinger, "ingest-linger", env.duration("DISPATCHER_INGEST_LINGER", ingest.DefaultGroupLinger),
		"the longest an ingest transaction that would carry one Publish call waits for company, only while calls come close enough together for company to be likely within it (fewer commits at a few hundred calls a second, for up to that much more Publish latency); 0, the default, never waits: calls go together only when they queue behind running transactions (env DISPATCHER_INGEST_LINGER)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", env.duration("DISPATCHER_SHUTDOWN_TIMEOUT", 20*time.Second), "how long in-flight deliveries may finish after SIGTERM before they are cancelled and re-queued (env DISPATCHER_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.RescueStuckAfter, "rescue-stuck-after", env.duration("DISPATCHER_RESCUE_STUCK_AFTER", time.Minute), "how long a job may stay running before River rescues it as the job of a dead worker (SIGKILL, OOM); must exceed the deliver job timeout (20s) (env DISPATCHER_RESCUE_STUCK_AFTER)")
	fs.DurationVar(&c.Retention, "retention", env.duration("DISPATCHER_RETENTION", retention.DefaultRetention), "how long events, the attempt history and finished River jobs are kept (at least 5m; env DISPATCHER_RETENTION)")
	fs.IntVar(&c.AttemptBodyBytes, "attempt-body-bytes", env.integer("DISPATCHER_ATTEMPT_BODY_BYTES", attempt.DefaultBodyBytes), "how much of each response body the attempt history keeps, as text; 0 keeps none (env DISPATCHER_ATTEMPT_BODY_BYTES)")
	fs.DurationVar(&c.DisableAfter, "disable-after", env.duration("DISPATCHER_DISABLE_AFTER", delivery.DefaultDisableAfter), "how long an endpoint may fail continuously (no successful delivery) before it is disabled (env DISPATCHER_DISABLE_AFTER)")
	fs.StringVar(&c.OperationalOwner, "operational-events-owner", env.get("DISPATCHER_OPERATIONAL_EVENTS_OWNER"), "owner id to which the dispatcher sends endpoint.failing, endpoint.disabled and endpoint.recovered for every other owner's endpoints; give that owner an endpoint (your URL) subscribed to endpoint.*; empty sends none (env DISPATCHER_OPERATIONAL_EVENTS_OWNER)")
	fs.StringVar(&c.JobLinkTemplate, "job-link-template", env.str("DISPATCHER_JOB_LINK_TEMPLATE", ""), "link to a delivery job in ListDeliveries; {job_id} is replaced; default: this process's River UI (env DISPATCHER_JOB_LINK_TEMPLATE)")
	fs.BoolVar(&c.Portal, "portal", env.boolean("DISPATCHER_PORTAL", true), "serve the endpoint owners' portal at /portal/ on the API port, reached through CreatePortalSession links (env DISPATCHER_PORTAL)")
	fs.StringVar(&c.PortalProductName, "portal-product-name", env.str("DISPATCHER_PORTAL_PRODUCT_NAME", ""), "the product name the portal shows in its header and titles; empty: Webhooks (env DISPATCHER_PORTAL_PRODUCT_NAME)")
	fs.StringVar(&c.PortalAccentColor, "portal-accent-color", env.str("DISPATCHER_PORTAL_ACCENT_COLOR", ""), "the portal's accent colour, #rrggbb, adjusted for contrast in the light and the dark scheme; empty: #2f5bea (env DISPATCHER_PORTAL_ACCENT_COLOR)")
	fs.StringVar(&c.PortalLogo, "portal-logo", env.str("DISPATCHER_PORTAL_LOGO", ""), "a logo file (PNG, JPEG, WebP, GIF or SVG, at most 256 KiB) the portal serves itself and shows in its header; empty: none (env DISPATCHER_PORTAL_LOGO)")
	fs.StringVar(&c.PortalReturnURL, "portal-return-url", env.str("DISPATCHER_PORTAL_RETURN_URL", ""), "the way back to the application, for portal sessions whose link names none (CreatePortalSession return_url): an absolute http(s) URL (env DISPATCHER_PORTAL_RETURN_URL)")
	fs.StringVar(&c.PortalURL, "portal-url", env.str("DISPATCHER_PORTAL_URL", ""), "the portal's public URL as browsers reach it, e.g. https://hooks.example.com/portal/ (behind a proxy, its path prefix); empty: http(s)://<API address>/portal/ (env DISPATCHER_PORTAL_URL)")
	fs.BoolVar(&c.RiverUI, "river-ui", env.boolean("DISPATCHER_RIVER_UI", true), "serve River UI at /riverui/ on the ops port, behind the operator token (env DISPATCHER_RIVER_UI)")
	fs.BoolVar(&c.Pprof, "pprof", env.boolean("DISPATCHER_PPROF", false), "serve Go's profiler at /debug/pprof/ on the ops port, for diagnosing CPU and memory use; keep the ops port private (env DISPATCHER_PPROF)")
	fs.IntVar(&c.APIMaxConns, "api-max-connections", env.integer("DISPATCHER_API_MAX_CONNECTIONS", 1000), "connections the API port (gRPC and HTTP/JSON) holds open at once; more wait in the kernel's backlog until one closes (env DISPATCHER_API_MAX_CONNECTIONS)")
	fs.IntVar(&c.APIMaxConnsPerAddr, "api-max-connections-per-address", env.integer("DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS", DefaultAPIMaxConnsPerAddr), "connections one client address (an IP, an IPv6 /64; a trusted proxy is exempt) may hold open on the API port; more are closed as soon as accepted (env DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS)")
	fs.IntVar(&c.OpsMaxConns, "ops-max-connections", env.integer("DISPATCHER_OPS_MAX_CONNECTIONS", DefaultOpsMaxConns), "connections the ops port holds open at once; more wait in the kernel's backlog until one closes (env DISPATCHER_OPS_MAX_CONNECTIONS)")
	fs.IntVar(&c.OpsMaxConnsPerAddr, "ops-max-connections-per-address", env.integer("DISPATCHER_OPS_MAX_CONNECTIONS_PER_ADDRESS", DefaultOpsMaxConnsPerAddr), "connections one client address may hold open on the ops port; more are closed as soon as accepted (env DISPATCHER_OPS_MAX_CONNECTIONS_PER_ADDRESS)")
	fs.DurationVar(&c.UnauthenticatedTimeout, "unauthenticated-timeout", env.duration("DISPATCHER_UNAUTHENTICATED_TIMEOUT", DefaultUnauthenticatedTimeout), "how long a connection to the API or ops port on which no request has presented a valid token may be idle, or take to send a request, before it is closed (env DISPATCHER_UNAUTHENTICATED_TIMEOUT)")
	fs.DurationVar(&c.APIIdleTimeout, "api-idle-timeout", env.duration("DISPATCHER_API_IDLE_TIMEOUT", 5*time.Minute), "an API connection with no call under way for this long is closed (gRPC: GOAWAY) (env DISPATCHER_API_IDLE_TIMEOUT)")
	fs.IntVar(&c.APIMaxBatchBytes, "api-max-batch-bytes", env.integer("DISPATCHER_API_MAX_BATCH_BYTES", grpcapi.DefaultBatchBytes), "largest PublishBatch request, in bytes (the gRPC message or the HTTP/JSON body) (env DISPATCHER_API_MAX_BATCH_BYTES)")
	fs.IntVar(&c.APIMaxRequestBytes, "api-max-request-bytes", env.integer("DISPATCHER_API_MAX_REQUEST_BYTES", grpcapi.DefaultRequestBytes), "largest request of every other call, in bytes (env DISPATCHER_API_MAX_REQUEST_BYTES)")
	budget := fs.Int("api-read-budget-bytes", env.integer("DISPATCHER_API_READ_BUDGET_BYTES", DefaultReadBudget), "bytes the API requests being read may reserve at once, over both protocols; an HTTP request reserves its Content-Length (its route's limit if unknown), a gRPC call its method's limit; beyond it HTTP waits up to 1s then answers 503, gRPC answers Unavailable (env DISPATCHER_API_READ_BUDGET_BYTES)")
	fs.IntVar(&c.GRPCMaxStreams, "grpc-max-concurrent-streams", env.integer("DISPATCHER_GRPC_MAX_CONCURRENT_STREAMS", 100), "gRPC calls under way at once on one connection (env DISPATCHER_GRPC_MAX_CONCURRENT_STREAMS)")
	fs.DurationVar(&c.GRPCMaxConnAge, "grpc-max-connection-age", env.duration("DISPATCHER_GRPC_MAX_CONNECTION_AGE", 30*time.Minute), "a gRPC connection is asked to close (GOAWAY) after this long, so clients spread over new replicas (env DISPATCHER_GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&c.GRPCMaxConnGrace, "grpc-max-connection-age-grace", env.duration("DISPATCHER_GRPC_MAX_CONNECTION_AGE_GRACE", time.Minute), "how long the calls of a connection past its age may finish before it is closed (env DISPATCHER_GRPC_MAX_CONNECTION_AGE_GRACE)")
	fs.DurationVar(&c.GRPCKeepaliveMin, "grpc-keepalive-min-time", env.duration("DISPATCHER_GRPC_KEEPALIVE_MIN_TIME", 20*time.Second), "a client pinging more often than this is disconnected (GOAWAY too_many_pings); pings without a call under way are allowed (env DISPATCHER_GRPC_KEEPALIVE_MIN_TIME)")
	fs.DurationVar(&c.OpsReadTimeout, "ops-read-timeout", env.duration("DISPATCHER_OPS_READ_TIMEOUT", 30*time.Second), "the ops port closes a connection whose request (headers and body) takes longer to arrive (env DISPATCHER_OPS_READ_TIMEOUT)")
	fs.DurationVar(&c.OpsIdleTimeout, "ops-idle-timeout", env.duration("DISPATCHER_OPS_IDLE_TIMEOUT", 2*time.Minute), "the ops port closes a keep-alive connection idle this long (env DISPATCHER_OPS_IDLE_TIMEOUT)")
	fs.IntVar(&c.OpsMaxHeaderBytes, "ops-max-header-bytes", env.integer("DISPATCHER_OPS_MAX_HEADER_BYTES", 64<<10), "largest request header block the ops port reads (431 beyond) (env DISPATCHER_OPS_MAX_HEADER_BYTES)")
	fs.DurationVar(&c.HealthzCache, "healthz-cache", env.duration("DISPATCHER_HEALTHZ_CACHE", time.Second), "how long /healthz reuses its last database ping; 0 pings on every request (env DISPATCHER_HEALTHZ_CACHE)")
	fs.IntVar(&c.AuthFailures, "auth-failures", env.integer("DISPATCHER_AUTH_FAILURES", 10), "failed tokens (bearer or login form) one client address may send in a burst before it is throttled (HTTP 429, gRPC ResourceExhausted) (env DISPATCHER_AUTH_FAILURES)")
	fs.DurationVar(&c.GRPCFirstMessageTimeout, "grpc-first-message-timeout", env.duration("DISPATCHER_GRPC_FIRST_MESSAGE_TIMEOUT", grpcapi.DefaultFirstMessageTimeout), "how long a gRPC call that needs no token (health, reflection) may take to send its first message before it is cancelled, its read reservation given back, and its address refused such calls for a minute (env DISPATCHER_GRPC_FIRST_MESSAGE_TIMEOUT)")
	trustedProxies := fs.String("trusted-proxies", env.str("DISPATCHER_TRUSTED_PROXIES", ""), "comma-separated CIDR prefixes (or IPs) of the reverse proxies in front of the API and ops ports: a request from one is counted, by the failed-token throttle, under the rightmost address of its X-Forwarded-For (or Forwarded for=) that is not a trusted proxy, and the proxies are exempt from the per-address connection caps; empty: every client is its peer address (env DISPATCHER_TRUSTED_PROXIES)")
	fs.DurationVar(&c.AuthFailuresPer, "auth-failures-per", env.duration("DISPATCHER_AUTH_FAILURES_PER", time.Minute), "how long a throttled address takes to earn back -auth-failures attempts (env DISPATCHER_AUTH_FAILURES_PER)")
	fs.BoolVar(&c.RefuseFormat1Secrets, "refuse-format1-secrets", env.boolean("DISPATCHER_REFUSE_FORMAT1_SECRETS", false), "refuse signing secrets still sealed in format 1 (bound to the endpoint alone): set it once `dispatcher reseal-secrets` has run on the whole fleet, so a value written back from an old dump is an error, not a key (env DISPATCHER_REFUSE_FORMAT1_SECRETS)")
	fs.BoolVar(&c.CookieSecure, "cookie-secure", env.boolean("DISPATCHER_COOKIE_SECURE", false), "mark the session cookies of River UI and the portal Secure even though this process serves plain HTTP: set it behind a TLS-terminating proxy (the portal's is Secure anyway with an https -portal-url) (env DISPATCHER_COOKIE_SECURE)")
	fs.StringVar(&c.LogFormat, "log-format", env.str("DISPATCHER_LOG_FORMAT", "json"), "log format: json or text (env DISPATCHER_LOG_FORMAT)")
	level := fs.String("log-level", env.str("DISPATCHER_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env DISPATCHER_LOG_LEVEL)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := env.err(); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := database.ValidateSchema(c.DB.Schema); err != nil {
		return nil, fmt.Errorf("invalid -schema: %w", err)
	}
	if err := ingest.ValidateOutboxTable(c.OutboxTable); err != nil {
		return nil, fmt.Errorf("invalid -outbox-table: %w", err)
	}
	c.Catalog = catalog.Default()
	if *catalogPath != "" {
		cat, err := catalog.Load(*catalogPath)
		if err != nil {
			return nil, fmt.Errorf("invalid -catalog: %w", err)
		}
		c.Catalog = cat
	}
	var ok bool
	if c.UnknownTypes, ok = ingest.ParseUnknownTypes(*unknownTypes); !ok {
		return nil, fmt.Errorf("invalid -unknown-types %q: want accept or refuse", *unknownTypes)
	}
	if err := c.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("invalid -log-level %q: want debug, info, warn or error", *level)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return nil, fmt.Errorf("invalid -log-format %q: want json or text", c.LogFormat)
	}
	for i, s := range splitList(*allow) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("invalid -egress-allow-cidrs entry %d %q: %w", i+1, s, err)
		}
		c.EgressAllowCIDRs = append(c.EgressAllowCIDRs, p.Masked())
	}
	switch {
	case *proxy != "":
		p, err := egress.ParseProxy(*proxy, *proxyCreds)
		if err != nil {
			return nil, fmt.Errorf("invalid -egress-proxy: %w", err)
		}
		c.EgressProxy = p
	case *proxyCreds != "":
		return nil, errors.New("-egress-proxy-credentials-file needs -egress-proxy")
	}
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		return nil, errors.New("-grpc-tls-cert and -grpc-tls-key go together")
	}
	if c.GRPCTLSClientCA != "" && c.GRPCTLSCert == "" {
		return nil, errors.New("-grpc-tls-client-ca needs -grpc-tls-cert and -grpc-tls-key: client certificates are checked only over TLS")
	}
	if (c.OpsTLSCert == "") != (c.OpsTLSKey == "") {
		return nil, errors.New("-ops-tls-cert and -ops-tls-key go together")
	}
	if c.DeliverWorkers < 1 || c.DeliverWorkers > 10000 {
		return nil, fmt.Errorf("invalid -deliver-workers %d: want 1..10000", c.DeliverWorkers)
	}
	if c.HandoffMemoryMB < 1 || c.HandoffMemoryMB > MaxHandoffMemoryMB {
		return nil, fmt.Errorf("invalid -handoff-memory-mb %d (DISPATCHER_HANDOFF_MEMORY_MB): want 1..%d", c.HandoffMemoryMB, MaxHandoffMemoryMB)
	}
	if c.HandoffLimit < 1 || c.HandoffLimit > MaxHandoffLimit {
		return nil, fmt.Errorf("invalid -handoff-limit %d (DISPATCHER_HANDOFF_LIMIT): want 1..%d", c.HandoffLimit, MaxHandoffLimit)
	}
	c.APIReadBudget = int64(*budget)
	proxies, err := auth.ParseProxies(*trustedProxies)
	if err != nil {
		return nil, fmt.Errorf("invalid -trusted-proxies (DISPATCHER_TRUSTED_PROXIES): %w", err)
	}
	c.TrustedProxies = proxies
	// A per-address cap left at its default follows a port-wide cap set
	// below it (a small test or development instance).
	if !isSet(fs, "api-max-connections-per-address", env, "DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS") {
		c.APIMaxConnsPerAddr = max(1, min(c.APIMaxConnsPerAddr, c.APIMaxConns))
	}
	if !isSet(fs, "ops-max-connections-per-address", env, "DISPATCHER_OPS_MAX_CONNECTIONS_PER_ADDRESS") {
		c.OpsMaxConnsPerAddr = max(1, min(c.OpsMaxConnsPerAddr, c.OpsMaxConns))
	}
	if err := c.validateLimits(); err != nil {
		return nil, err
	}
	if c.IngestLinger < 0 || c.IngestLinger > 100*time.Millisecond {
		return nil, fmt.Errorf("invalid -ingest-linger %s (DISPATCHER_INGEST_LINGER): want 0..100ms", c.IngestLinger)
	}
	if c.IngestTxs < 1 || c.IngestTxs > 1000 {
		return nil, fmt.Errorf("invalid -ingest-transactions %d: want 1..1000", c.IngestTxs)
	}
	if c.FanoutWorkers < 1 || c.FanoutWorkers > 10000 {
		return nil, fmt.Errorf("invalid -fanout-workers %d: want 1..10000", c.FanoutWorkers)
	}
	if c.MaxEndpoints == 0 || c.MaxEndpoints < -1 {
		return nil, fmt.Errorf("invalid -max-endpoints-per-owner %d: want a positive number or -1 (no limit)", c.MaxEndpoints)
	}
	if c.OutboxBatch < 1 || c.OutboxBatch > 10000 {
		return nil, fmt.Errorf("invalid -outbox-batch %d: want 1..10000", c.OutboxBatch)
	}
	if c.AttemptBodyBytes < 0 || c.AttemptBodyBytes > attempt.DefaultBodyBytes {
		return nil, fmt.Errorf("invalid -attempt-body-bytes %d: want 0..%d", c.AttemptBodyBytes, attempt.DefaultBodyBytes)
	}
	// The retention is also how long an event id and a delivery's unique key
	// are remembered (internal/retention.MinRetention), so it must outlast
	// any late retry, a fanout re-run after -rescue-stuck-after included.
	if minRetention := max(retention.MinRetention, 2*c.RescueStuckAfter); c.Retention < minRetention {
		return nil, fmt.Errorf("invalid -retention %s: want at least %s (%s, and twice -rescue-stuck-after): "+
			"an event id is deduplicated, and a delivery unique, only while the event and the delivery's job are kept, "+
			"so a publisher's retry or a fanout re-run after a crash that comes later would deliver it again", c.Retention, minRetention, retention.MinRetention)
	}
	if c.DisableAfter < time.Second || c.DisableAfter > 30*24*time.Hour {
		return nil, fmt.Errorf("invalid -disable-after %s: want 1s..720h", c.DisableAfter)
	}
	if err := portal.ValidateBranding(portal.Branding{ProductName: c.PortalProductName, AccentColor: c.PortalAccentColor}); err != nil {
		name := "-portal-product-name (DISPATCHER_PORTAL_PRODUCT_NAME)"
		if strings.HasPrefix(err.Error(), portal.FieldAccentColor) {
			name = "-portal-accent-color (DISPATCHER_PORTAL_ACCENT_COLOR)"
		}
		return nil, fmt.Errorf("invalid %s: %w", name, err)
	}
	if c.PortalReturnURL != "" {
		if err := portal.ValidateReturnURL(c.PortalReturnURL); err != nil {
			return nil, fmt.Errorf("invalid -portal-return-url (DISPATCHER_PORTAL_RETURN_URL) %q: %w", c.PortalReturnURL, err)
		}
	}
	if c.OperationalOwner != "" {
		if err := webhook.ValidateOwnerID(c.OperationalOwner); err != nil {
			if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
				return nil, fmt.Errorf("invalid -operational-events-owner %q: %s", c.OperationalOwner, fe.Reason)
			}
			return nil, fmt.Errorf("invalid -operational-events-owner: %w", err)
		}
	}
	c.MasterKeys = env.get("DISPATCHER_MASTER_KEYS")
	if c.MasterKeys == "" {
		if f := env.get("DISPATCHER_MASTER_KEYS_FILE"); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read DISPATCHER_MASTER_KEYS_FILE: %w", err)
			}
			c.MasterKeys = strings.TrimSpace(string(b))
		}
	}
	if c.MasterKeys == "" {
		return nil, errors.New("no master key: set DISPATCHER_MASTER_KEYS (or DISPATCHER_MASTER_KEYS_FILE); `dispatcher gen-master-key` prints one")
	}
	c.PublisherTokens = env.get("DISPATCHER_PUBLISHER_TOKENS")
	c.AdminTokens = env.get("DISPATCHER_ADMIN_TOKENS")
	c.OperatorTokens = env.get("DISPATCHER_OPERATOR_TOKENS")
	c.AccessToken = env.get("DISPATCHER_ACCESS_TOKEN")
	tr, err := tracing.FromEnv(env.lookup)
	if err != nil {
		return nil, err
	}
	c.Tracing = tr
	return c, nil
}

// DefaultReadBudget is -api-read-budget-bytes' default: sixteen of the
// largest PublishBatch at once, or a thousand of any other call.
const DefaultReadBudget = 64 << 20

// Connection limits' defaults (docs/operations.md gives the arithmetic):
// the API port's 1,000 connections take at least 16 addresses to fill at 64
// each, which is what a host needs for 64 HTTP/1.1 requests at once (a gRPC
// client needs one connection for 100 calls); the ops port serves a
// Prometheus, probes and a few browsers (6 connections each).
const (
	DefaultAPIMaxConnsPerAddr     = 64
	DefaultOpsMaxConns            = 256
	DefaultOpsMaxConnsPerAddr     = 16
	DefaultUnauthenticatedTimeout = 10 * time.Second
)

// validateLimits checks the connection and request limits.
func (c *serveConfig) validateLimits() error {
	type intRange struct {
		flag      string
		v, lo, hi int64
	}
	for _, r := range []intRange{
		{"-api-max-connections (DISPATCHER_API_MAX_CONNECTIONS)", int64(c.APIMaxConns), 1, 1 << 20},
		{"-api-max-connections-per-address (DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS)", int64(c.APIMaxConnsPerAddr), 1, int64(c.APIMaxConns)},
		{"-ops-max-connections (DISPATCHER_OPS_MAX_CONNECTIONS)", int64(c.OpsMaxConns), 1, 1 << 20},
		{"-ops-max-connections-per-address (DISPATCHER_OPS_MAX_CONNECTIONS_PER_ADDRESS)", int64(c.OpsMaxConnsPerAddr), 1, int64(c.OpsMaxConns)},
		{"-api-max-batch-bytes (DISPATCHER_API_MAX_BATCH_BYTES)", int64(c.APIMaxBatchBytes), 64 << 10, 64 << 20},
		{"-api-max-request-bytes (DISPATCHER_API_MAX_REQUEST_BYTES)", int64(c.APIMaxRequestBytes), 4 << 10, 64 << 20},
		{"-api-read-budget-bytes (DISPATCHER_API_READ_BUDGET_BYTES)", c.APIReadBudget, 1 << 20, 1 << 40},
		{"-grpc-max-concurrent-streams (DISPATCHER_GRPC_MAX_CONCURRENT_STREAMS)", int64(c.GRPCMaxStreams), 1, 1 << 20},
		{"-ops-max-header-bytes (DISPATCHER_OPS_MAX_HEADER_BYTES)", int64(c.OpsMaxHeaderBytes), 4 << 10, 1 << 20},
		{"-auth-failures (DISPATCHER_AUTH_FAILURES)", int64(c.AuthFailures), 1, 1 << 20},
	} {
		if r.v < r.lo || r.v > r.hi {
			return fmt.Errorf("invalid %s %d: want %d..%d", r.flag, r.v, r.lo, r.hi)
		}
	}
	if largest := int64(max(c.APIMaxBatchBytes, c.APIMaxRequestBytes)); c.APIReadBudget < largest {
		return fmt.Errorf("invalid -api-read-budget-bytes (DISPATCHER_API_READ_BUDGET_BYTES) %d: want at least the largest request (%d)", c.APIReadBudget, largest)
	}
	type durRange struct {
		flag      string
		v, lo, hi time.Duration
	}
	for _, r := range []durRange{
		{"-api-idle-timeout (DISPATCHER_API_IDLE_TIMEOUT)", c.APIIdleTimeout, time.Second, 24 * time.Hour},
		{"-unauthenticated-timeout (DISPATCHER_UNAUTHENTICATED_TIMEOUT)", c.UnauthenticatedTimeout, time.Second, 10 * time.Minute},
		{"-grpc-max-connection-age (DISPATCHER_GRPC_MAX_CONNECTION_AGE)", c.GRPCMaxConnAge, time.Minute, 30 * 24 * time.Hour},
		{"-grpc-max-connection-age-grace (DISPATCHER_GRPC_MAX_CONNECTION_AGE_GRACE)", c.GRPCMaxConnGrace, time.Second, 24 * time.Hour},
		{"-grpc-keepalive-min-time (DISPATCHER_GRPC_KEEPALIVE_MIN_TIME)", c.GRPCKeepaliveMin, time.Second, time.Hour},
		{"-ops-read-timeout (DISPATCHER_OPS_READ_TIMEOUT)", c.OpsReadTimeout, time.Second, time.Hour},
		{"-ops-idle-timeout (DISPATCHER_OPS_IDLE_TIMEOUT)", c.OpsIdleTimeout, time.Second, 24 * time.Hour},
		{"-healthz-cache (DISPATCHER_HEALTHZ_CACHE)", c.HealthzCache, 0, time.Minute},
		{"-auth-failures-per (DISPATCHER_AUTH_FAILURES_PER)", c.AuthFailuresPer, time.Second, 24 * time.Hour},
		{"-grpc-first-message-timeout (DISPATCHER_GRPC_FIRST_MESSAGE_TIMEOUT)", c.GRPCFirstMessageTimeout, 100 * time.Millisecond, time.Minute},
	} {
		if r.v < r.lo || r.v > r.hi {
			return fmt.Errorf("invalid %s %s: want %s..%s", r.flag, r.v, r.lo, r.hi)
		}
	}
	return nil
}

// grpcConnOptions bounds the gRPC API's connections: calls per connection,
// idle and old connections, and how often clients may ping. The server pings
// a connection quiet for two minutes and drops it if the ping goes
// unanswered for 20 s, so a peer that vanished frees its connection.
func (c *serveConfig) grpcConnOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(c.GRPCMaxStreams)),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     c.APIIdleTimeout,
			MaxConnectionAge:      c.GRPCMaxConnAge,
			MaxConnectionAgeGrace: c.GRPCMaxConnGrace,
			Time:                  2 * time.Minute,
			Timeout:               20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.GRPCKeepaliveMin, PermitWithoutStream: true}),
		// Calls run on long-lived goroutines (more start when all are busy)
		// instead of a new one each: a Publish call's validation and
		// ingest need a deeper stack than a new goroutine has, and growing
		// it on every call (copying the stack) was 6-7 % of the process's
		// CPU at 500 calls/s. grpc-go marks the option experimental.
		grpc.NumStreamWorkers(uint32(max(16, 4*runtime.GOMAXPROCS(0)))),
	}
}

// tokenSources names where each role's tokens are configured, for errors.
var tokenSources = map[auth.Role]string{
	auth.RolePublisher: "DISPATCHER_PUBLISHER_TOKENS/-publisher-token-file",
	auth.RoleAdmin:     "DISPATCHER_ADMIN_TOKENS/-admin-token-file",
	auth.RoleOperator:  "DISPATCHER_OPERATOR_TOKENS/-operator-token-file",
}

// authenticator loads every role's tokens and builds the Authenticator.
// Errors name the variable or flag to fix, never a token.
func (c *serveConfig) authenticator(logger *slog.Logger) (*auth.Authenticator, error) {
	var toks auth.Tokens
	for _, r := range []struct {
		role      auth.Role
		env, file string
		dst       *[]string
	}{
		{auth.RolePublisher, c.PublisherTokens, c.PublisherTokenFile, &toks.Publisher},
		{auth.RoleAdmin, c.AdminTokens, c.AdminTokenFile, &toks.Admin},
		{auth.RoleOperator, c.OperatorTokens, c.OperatorTokenFile, &toks.Operator},
	} {
		list, err := auth.LoadTokens(r.env, r.file)
		if err != nil {
			return nil, fmt.Errorf("invalid %s: %w", tokenSources[r.role], err)
		}
		*r.dst = list
	}
	a, err := auth.New(toks, logger)
	if shared := (*auth.SharedTokenError)(nil); errors.As(err, &shared) {
		return nil, fmt.Errorf("invalid %s: %w (also in %s)", tokenSources[shared.Second], err, tokenSources[shared.First])
	}
	if errors.Is(err, auth.ErrNoTokens) {
		return nil, fmt.Errorf("no API tokens: set %s and/or %s: %w", tokenSources[auth.RolePublisher], tokenSources[auth.RoleAdmin], err)
	}
	return a, err
}

// environ reads configuration from environment variables. Malformed values
// are collected, not silently replaced by defaults, and reported by err.
type environ struct {
	lookup func(string) (string, bool)
	errs   []error
}

func newEnviron(lookup func(string) (string, bool)) *environ { return &environ{lookup: lookup} }

// osEnviron reads the process environment.
func osEnviron() *environ { return newEnviron(os.LookupEnv) }

func (e *environ) get(key string) string {
	v, _ := e.lookup(key)
	return v
}

func (e *environ) str(key, def string) string {
	if v := e.get(key); v != "" {
		return v
	}
	return def
}

func (e *environ) integer(key string, def int) int {
	v := e.get(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("invalid %s %q: want an integer", key, v))
		return def
	}
	return n
}

func (e *environ) boolean(key string, def bool) bool {
	v := e.get(key)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("invalid %s %q: want true or false", key, v))
		return def
	}
	return b
}

func (e *environ) duration(key string, def time.Duration) time.Duration {
	v := e.get(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("invalid %s %q: want a duration like 30s or 24h", key, v))
		return def
	}
	return d
}

func (e *environ) err() error { return errors.Join(e.errs...) }

// isSet reports whether a setting was given, by its flag or its variable.
func isSet(fs *flag.FlagSet, name string, env *environ, key string) bool {
	set := env.get(key) != ""
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newLogger(format string, level slog.Level, w *os.File) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
