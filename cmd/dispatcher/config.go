package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/database"
)

// DefaultDatabaseURL is the local server used when nothing is configured.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// dbConfig is shared by every command that talks to Postgres directly.
type dbConfig struct {
	URL      string
	Schema   string
	MaxConns int
}

func (c *dbConfig) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "database-url", envOr("DATABASE_URL", envOr("DISPATCHER_DATABASE_URL", DefaultDatabaseURL)),
		"Postgres URL of the dispatcher's database (env DATABASE_URL)")
	fs.StringVar(&c.Schema, "schema", envOr("DISPATCHER_SCHEMA", database.DefaultSchema),
		"Postgres schema holding the dispatcher's and River's tables (env DISPATCHER_SCHEMA)")
	fs.IntVar(&c.MaxConns, "db-max-conns", envInt("DISPATCHER_DB_MAX_CONNS", 40),
		"maximum connections in the dispatcher's pool (env DISPATCHER_DB_MAX_CONNS)")
}

// serveConfig is everything `dispatcher serve` reads.
type serveConfig struct {
	DB dbConfig

	Migrate bool

	GRPCAddr    string
	GRPCTLSCert string
	GRPCTLSKey  string
	OpsAddr     string

	// Secrets: environment or files only, never flags.
	MasterKeys         string
	PublisherTokens    string
	AdminTokens        string
	PublisherTokenFile string
	AdminTokenFile     string

	OutboxURL        string
	OutboxBatch      int
	OutboxPoll       time.Duration
	OutboxDelete     bool
	EgressAllowCIDRs []netip.Prefix
	RequireHTTPS     bool

	AccessAddr    string
	AccessTLS     bool
	AccessCAFile  string
	AccessTimeout time.Duration
	AccessToken   string

	DeliverWorkers   int
	FanoutWorkers    int
	ShutdownTimeout  time.Duration
	RescueStuckAfter time.Duration
	Retention        time.Duration
	JobLinkTemplate  string
	RiverUI          bool

	LogFormat string
	LogLevel  slog.Level
}

func parseServeConfig(args []string) (*serveConfig, error) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.DB.bind(fs)
	fs.BoolVar(&c.Migrate, "migrate", envBool("DISPATCHER_MIGRATE", false), "apply migrations at start-up instead of refusing an unmigrated database (env DISPATCHER_MIGRATE)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", envOr("DISPATCHER_GRPC_ADDR", "127.0.0.1:7070"), "gRPC API listen address (env DISPATCHER_GRPC_ADDR)")
	fs.StringVar(&c.GRPCTLSCert, "grpc-tls-cert", os.Getenv("DISPATCHER_GRPC_TLS_CERT"), "TLS certificate file for the gRPC API; with -grpc-tls-key enables TLS (env DISPATCHER_GRPC_TLS_CERT)")
	fs.StringVar(&c.GRPCTLSKey, "grpc-tls-key", os.Getenv("DISPATCHER_GRPC_TLS_KEY"), "TLS key file for the gRPC API (env DISPATCHER_GRPC_TLS_KEY)")
	fs.StringVar(&c.OpsAddr, "ops-addr", envOr("DISPATCHER_OPS_ADDR", "127.0.0.1:9090"), "operator HTTP listen address: /metrics, /healthz, /riverui/ (env DISPATCHER_OPS_ADDR)")
	fs.StringVar(&c.PublisherTokenFile, "publisher-token-file", os.Getenv("DISPATCHER_PUBLISHER_TOKEN_FILE"), "file of publisher tokens, one per line (env DISPATCHER_PUBLISHER_TOKEN_FILE)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", os.Getenv("DISPATCHER_ADMIN_TOKEN_FILE"), "file of admin tokens, one per line (env DISPATCHER_ADMIN_TOKEN_FILE)")
	fs.StringVar(&c.OutboxURL, "outbox-database-url", os.Getenv("DISPATCHER_OUTBOX_DATABASE_URL"), "Postgres URL of the main app's database holding webhook_outbox; empty disables the relay (env DISPATCHER_OUTBOX_DATABASE_URL)")
	fs.IntVar(&c.OutboxBatch, "outbox-batch", envInt("DISPATCHER_OUTBOX_BATCH", 500), "outbox rows claimed per batch (env DISPATCHER_OUTBOX_BATCH)")
	fs.DurationVar(&c.OutboxPoll, "outbox-poll", envDuration("DISPATCHER_OUTBOX_POLL", time.Second), "outbox poll interval when no NOTIFY arrives (env DISPATCHER_OUTBOX_POLL)")
	fs.BoolVar(&c.OutboxDelete, "outbox-delete", envBool("DISPATCHER_OUTBOX_DELETE", false), "delete relayed outbox rows instead of marking them (env DISPATCHER_OUTBOX_DELETE)")
	allow := fs.String("egress-allow-cidrs", os.Getenv("DISPATCHER_EGRESS_ALLOW_CIDRS"), "comma-separated CIDRs receivers may use despite the SSRF deny list, e.g. 127.0.0.0/8 for local development; empty in production (env DISPATCHER_EGRESS_ALLOW_CIDRS)")
	fs.BoolVar(&c.RequireHTTPS, "require-https", envBool("DISPATCHER_REQUIRE_HTTPS", false), "refuse endpoint URLs that are not https (env DISPATCHER_REQUIRE_HTTPS)")
	fs.StringVar(&c.AccessAddr, "access-addr", os.Getenv("DISPATCHER_ACCESS_ADDR"), "address of the access service (EmbedAdmits); empty: embed-bound endpoints receive nothing scoped (env DISPATCHER_ACCESS_ADDR)")
	fs.BoolVar(&c.AccessTLS, "access-tls", envBool("DISPATCHER_ACCESS_TLS", false), "use TLS to the access service (env DISPATCHER_ACCESS_TLS)")
	fs.StringVar(&c.AccessCAFile, "access-ca-file", os.Getenv("DISPATCHER_ACCESS_CA_FILE"), "CA bundle for the access service (env DISPATCHER_ACCESS_CA_FILE)")
	fs.DurationVar(&c.AccessTimeout, "access-timeout", envDuration("DISPATCHER_ACCESS_TIMEOUT", 2*time.Second), "timeout of one EmbedAdmits call (env DISPATCHER_ACCESS_TIMEOUT)")
	fs.IntVar(&c.DeliverWorkers, "deliver-workers", envInt("DISPATCHER_DELIVER_WORKERS", 200), "concurrent deliveries per process (env DISPATCHER_DELIVER_WORKERS)")
	fs.IntVar(&c.FanoutWorkers, "fanout-workers", envInt("DISPATCHER_FANOUT_WORKERS", 20), "concurrent fanouts per process (env DISPATCHER_FANOUT_WORKERS)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", envDuration("DISPATCHER_SHUTDOWN_TIMEOUT", 20*time.Second), "how long in-flight deliveries may finish after SIGTERM before they are cancelled and re-queued (env DISPATCHER_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.RescueStuckAfter, "rescue-stuck-after", envDuration("DISPATCHER_RESCUE_STUCK_AFTER", time.Minute), "how long a job may stay running before River rescues it as the job of a dead worker (SIGKILL, OOM); must exceed the deliver job timeout (20s) (env DISPATCHER_RESCUE_STUCK_AFTER)")
	fs.DurationVar(&c.Retention, "retention", envDuration("DISPATCHER_RETENTION", 30*24*time.Hour), "how long events are kept (env DISPATCHER_RETENTION)")
	fs.StringVar(&c.JobLinkTemplate, "job-link-template", envOr("DISPATCHER_JOB_LINK_TEMPLATE", ""), "link to a delivery job in ListDeliveries; {job_id} is replaced; default: this process's River UI (env DISPATCHER_JOB_LINK_TEMPLATE)")
	fs.BoolVar(&c.RiverUI, "river-ui", envBool("DISPATCHER_RIVER_UI", true), "serve River UI at /riverui/ on the ops port, behind the admin token (env DISPATCHER_RIVER_UI)")
	fs.StringVar(&c.LogFormat, "log-format", envOr("DISPATCHER_LOG_FORMAT", "json"), "log format: json or text (env DISPATCHER_LOG_FORMAT)")
	level := fs.String("log-level", envOr("DISPATCHER_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env DISPATCHER_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := errors.Join(envErrs...); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
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
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		return nil, errors.New("-grpc-tls-cert and -grpc-tls-key go together")
	}
	if c.DeliverWorkers < 1 || c.DeliverWorkers > 10000 {
		return nil, fmt.Errorf("invalid -deliver-workers %d: want 1..10000", c.DeliverWorkers)
	}
	if c.FanoutWorkers < 1 || c.FanoutWorkers > 10000 {
		return nil, fmt.Errorf("invalid -fanout-workers %d: want 1..10000", c.FanoutWorkers)
	}
	if c.OutboxBatch < 1 || c.OutboxBatch > 10000 {
		return nil, fmt.Errorf("invalid -outbox-batch %d: want 1..10000", c.OutboxBatch)
	}
	if c.Retention < time.Hour {
		return nil, fmt.Errorf("invalid -retention %s: want at least 1h", c.Retention)
	}
	c.MasterKeys = os.Getenv("DISPATCHER_MASTER_KEYS")
	if c.MasterKeys == "" {
		if f := os.Getenv("DISPATCHER_MASTER_KEYS_FILE"); f != "" {
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
	c.PublisherTokens = os.Getenv("DISPATCHER_PUBLISHER_TOKENS")
	c.AdminTokens = os.Getenv("DISPATCHER_ADMIN_TOKENS")
	c.AccessToken = os.Getenv("DISPATCHER_ACCESS_TOKEN")
	return c, nil
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// envErrs collects malformed environment values; parseServeConfig reports
// them instead of silently falling back to defaults.
var envErrs []error

func envInt(key string, def int) int {
	if v := os.Getenv(key); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("invalid %s %q: want an integer", key, v))
			return def
		}
		return n
	}
	return def
}

func envBool(key string, def bool) bool {
	if v := os.Getenv(key); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("invalid %s %q: want true or false", key, v))
			return def
		}
		return b
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("invalid %s %q: want a duration like 30s or 24h", key, v))
			return def
		}
		return d
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
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
