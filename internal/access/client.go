// Package access is the dispatcher's side of the access service: a gRPC client
// of access.v1.AccessService that implements scope.EmbedAdmitter. A fake
// service for tests and `dispatcher dev-access` is in package accesstest.
//
// The client turns gRPC status codes into scope's three outcomes. NotFound and
// PermissionDenied are definite answers ("no"); InvalidArgument and OutOfRange
// mean the question was malformed and asking again cannot help (an error that
// scope denies on); everything else, including codes that would be fixed by
// configuration such as Unauthenticated or Unimplemented, is transient and
// wraps scope.ErrUnavailable so the fanout is retried rather than an event
// silently lost or leaked.
package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	accessv1 "github.com/standmeet/webhook-dispatcher/pkg/api/access/v1"

	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// DefaultTimeout bounds one EmbedAdmits call when Config.Timeout is zero. The
// fanout asks once per embed-bound endpoint, so a slow service must not hold
// a fanout job for long.
const DefaultTimeout = 2 * time.Second

// Reasons the client reports for definite "no" answers given as status codes.
const (
	ReasonNotFound         = "not_found"
	ReasonPermissionDenied = "permission_denied"
)

// Client asks the access service whether an embed admits an event. It is safe
// for concurrent use.
type Client struct {
	rpc     accessv1.AccessServiceClient
	timeout time.Duration
}

var _ scope.EmbedAdmitter = (*Client)(nil)

// NewClient returns a Client over conn. timeout bounds each call (zero means
// DefaultTimeout, a negative value means no bound beyond the caller's ctx).
func NewClient(conn grpc.ClientConnInterface, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Client{rpc: accessv1.NewAccessServiceClient(conn), timeout: timeout}
}

// EmbedAdmits implements scope.EmbedAdmitter. A nil *Client admits nothing, so
// a composition root that forgot to configure the service fails closed.
func (c *Client) EmbedAdmits(ctx context.Context, ownerID, embedID string, e *webhook.Event) (bool, string, error) {
	if c == nil {
		return false, scope.ReasonNoAccessService, nil
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.rpc.EmbedAdmits(ctx, &accessv1.EmbedAdmitsRequest{
		OwnerId:   ownerID,
		EmbedId:   embedID,
		EventId:   e.ID,
		EventType: e.Type,
		Subject:   e.Subject,
		Data:      string(e.Data),
	})
	if err != nil {
		return classify(err)
	}
	return resp.GetAdmits(), resp.GetReason(), nil
}

// classify maps a failed call to scope's outcomes; see the package doc.
func classify(err error) (bool, string, error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false, "", fmt.Errorf("access: EmbedAdmits: %w: %w", scope.ErrUnavailable, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		// Not a status: something below gRPC failed. Retrying is the only
		// answer that neither leaks nor loses.
		return false, "", fmt.Errorf("access: EmbedAdmits: %w: %w", scope.ErrUnavailable, err)
	}
	switch st.Code() {
	case codes.NotFound:
		return false, ReasonNotFound, nil
	case codes.PermissionDenied:
		return false, ReasonPermissionDenied, nil
	case codes.InvalidArgument, codes.OutOfRange:
		return false, "", fmt.Errorf("access: EmbedAdmits rejected the request: %w", err)
	default:
		// Unavailable, DeadlineExceeded, ResourceExhausted, Aborted, Internal,
		// Unknown, Canceled, and the configuration errors (Unauthenticated,
		// Unimplemented, FailedPrecondition): none is an answer about the
		// embed, and each can go away.
		return false, "", fmt.Errorf("access: EmbedAdmits: %w: %s: %s", scope.ErrUnavailable, st.Code(), st.Message())
	}
}

// Config says how to reach the access service.
type Config struct {
	// Addr is the gRPC target, e.g. "access.internal:7071" or "dns:///access:7071".
	Addr string
	// TLS turns on transport security (system roots unless CAFile is set).
	TLS bool
	// CAFile is a PEM bundle of roots to trust instead of the system's.
	CAFile string
	// Timeout bounds each call; zero means DefaultTimeout.
	Timeout time.Duration
	// Token, when set, is sent as "authorization: Bearer <token>" on every call.
	Token string
	// Trace records a client span per call and sends the trace context to
	// the service (internal/tracing turns it on with tracing).
	Trace bool
}

// Dial returns a Client for cfg and the connection's Closer. grpc connects
// lazily, so an unreachable service is not an error here: it shows up per
// call as scope.ErrUnavailable and the fanout retries.
func Dial(cfg Config) (*Client, io.Closer, error) {
	if cfg.Addr == "" {
		return nil, nil, errors.New("access: address is empty")
	}
	creds := insecure.NewCredentials()
	if cfg.TLS || cfg.CAFile != "" {
		tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("access: read CA file: %w", err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("access: CA file %s holds no PEM certificates", cfg.CAFile)
			}
			tlsCfg.RootCAs = roots
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.Trace {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithMeterProvider(noop.NewMeterProvider()))))
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: cfg.Token, secure: cfg.TLS || cfg.CAFile != ""}))
	}
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("access: dial %s: %w", cfg.Addr, err)
	}
	return NewClient(conn, cfg.Timeout), conn, nil
}

// bearer sends a static token. Plaintext is allowed on purpose: inside a
// cluster a mesh sidecar often provides the transport security.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }
