package grpcapi

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/connlimit"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
	"github.com/standmeet/webhook-dispatcher/internal/portmux"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// Default request size limits. A PublishBatch of MaxBatchSize events, each
// with data of the most webhook.MaxDataBytes, fits in DefaultBatchBytes with
// room to spare; every other request is one event or a few fields.
const (
	DefaultBatchBytes   = 4 << 20
	DefaultRequestBytes = 64 << 10
)

// Limits bounds the size of one request message, per method.
type Limits struct {
	// BatchBytes bounds PublishBatch (0: DefaultBatchBytes).
	BatchBytes int
	// RequestBytes bounds every other call (0: DefaultRequestBytes).
	RequestBytes int
}

func (l Limits) withDefaults() Limits {
	if l.BatchBytes <= 0 {
		l.BatchBytes = DefaultBatchBytes
	}
	if l.RequestBytes <= 0 {
		l.RequestBytes = DefaultRequestBytes
	}
	return l
}

// Largest is the largest request any method takes: the gRPC server's own
// bound on a message (grpc.MaxRecvMsgSize).
func (l Limits) Largest() int {
	l = l.withDefaults()
	return max(l.BatchBytes, l.RequestBytes)
}

// For returns the limit of fullMethod.
func (l Limits) For(fullMethod string) int {
	l = l.withDefaults()
	if fullMethod == webhooksv1.EventService_PublishBatch_FullMethodName {
		return l.BatchBytes
	}
	return l.RequestBytes
}

// forMessage returns the limit of a request message of m's type: the codec
// sees the message, not the method.
func (l Limits) forMessage(m any) int {
	l = l.withDefaults()
	if _, ok := m.(*webhooksv1.PublishBatchRequest); ok {
		return l.BatchBytes
	}
	return l.RequestBytes
}

// GateConfig configures a Gate.
type GateConfig struct {
	// Auth checks tokens; required.
	Auth *auth.Authenticator
	// Throttle limits failed tokens per client address; nil: no limit.
	Throttle *auth.Throttle
	// Proxies are the reverse proxies whose forwarding metadata
	// (x-forwarded-for, forwarded) names the client address the throttle
	// and the per-address cap on open reads count; zero: none.
	Proxies auth.Proxies
	// Budget bounds the bytes of requests being read at once; nil: no bound.
	Budget *inflight.Budget
	// Limits bounds one request per method.
	Limits Limits
	// Conns, when set, is told which connections authenticated (their
	// short unauthenticated deadline ends) and which answered a call that
	// needs no token (the deadline starts again).
	Conns Conns
	// Refused is told each call refused to bound what clients hold, by
	// reason (internal/connlimit's); nil: nobody is.
	Refused func(reason string)
	// FirstMessageTimeout bounds how long a call that needs no token
	// (health, reflection) may take to send its first message; 0:
	// DefaultFirstMessageTimeout.
	FirstMessageTimeout time.Duration
	// Now is the clock of the penalty for a silent call; nil: time.Now.
	Now func() time.Time
}

// Conns is what the gate tells the port's connections (internal/connlimit's
// Listener), by a call's peer address.
type Conns interface {
	Authenticated(addr net.Addr)
	Touch(addr net.Addr)
}

// Gate admits gRPC calls before any of their message is read, and turns a
// request that cannot be decoded into a client error.
//
// Its tap handler (grpc.InTapHandle) runs when a call's headers arrive, on
// the connection's reader, before the server reads a byte of the message:
// it refuses a missing or unknown token (a wrong one as throttled when its
// client address sent too many; a right one always passes) and a role that
// may not call the method, then reserves the method's size limit from the
// Budget (Unavailable when it is full, which clients retry with backoff as
// they would HTTP's 503; the tap must not block) until
// the call ends. So an unauthenticated caller costs the server the headers
// it sent, whatever message follows them. Calls of the HTTP/JSON API come in
// over the in-process pipe already authenticated and reserved by its guard
// (internal/httpapi), and reserve nothing twice.
//
// The interceptors check the token again (a server built without the tap,
// in tests, is still closed) and turn the codec's findings into statuses.
//
// Health and reflection need no token, so their calls are bounded apart:
// gRPC reads any message up to the largest limit before a codec can look at
// it, so each such call reserves that much from a small budget of its own
// from its headers until its message has been read — microseconds for the
// few bytes these calls send — and is answered Unavailable when the budget
// is taken. Health checks have a budget of their own (openHealthReads reads
// at once), apart from reflection's first messages (openReflectionReads)
// and from a stream's later messages (openNextReads: reflection is a
// bidirectional stream, which waits in RecvMsg for the client's next
// request), so that no other call's reservation ever delays a health check:
// grpcurl resolves a method by reflection and keeps that stream open while
// it calls the method, from the same address. What an unauthenticated
// client can make the process hold is those budgets.
//
// A client that opens such calls and never sends their message would hold
// its reservations, so:
//   - one client address (the IP, an IPv6 address's /64, as the throttle
//     counts it; through GateConfig.Proxies; the in-process pipe is exempt)
//     holds at most one read at a time in each budget;
//   - a call's first message must arrive within FirstMessageTimeout of its
//     headers, or the call is cancelled and its reservation given back
//     (reason first_message_timeout);
//   - an address whose call was so cancelled may open no such call for
//     silentPenalty: to keep every health read taken, a client needs
//     openHealthReads × silentPenalty / FirstMessageTimeout addresses
//     (4 × 60 s / 5 s = 48 at the defaults), where two used to do.
type Gate struct {
	cfg    GateConfig
	codec  *gateCodec
	limits Limits
	// open bounds the reads of calls that need no token, by openClass.
	open [openClasses]*inflight.Budget
	// silent remembers the addresses whose call sent no first message in
	// time.
	silent *auth.Throttle

	// openMu guards openPeers: the client addresses holding an open read,
	// at most one each per class.
	openMu    sync.Mutex
	openPeers map[openPeer]struct{}
}

// openClass is which budget an unauthenticated read reserves from.
type openClass int

const (
	// classHealth: the first (only) message of a health Check or Watch.
	classHealth openClass = iota
	// classReflection: the first message of a reflection stream.
	classReflection
	// classNext: a stream's later messages.
	classNext
	openClasses
)

// openPeer is a client address (its IP) and the class of its read.
type openPeer struct {
	ip    string
	class openClass
}

// How many reads of calls that need no token may be under way at once, by
// class; how long such a call may take to send its first message by
// default; and how long an address that let that pass is refused such
// calls.
const (
	openHealthReads            = 4
	openReflectionReads        = 1
	openNextReads              = 1
	DefaultFirstMessageTimeout = 5 * time.Second
	silentPenalty              = time.Minute
)

// NewGate returns a Gate.
func NewGate(cfg GateConfig) *Gate {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.FirstMessageTimeout <= 0 {
		cfg.FirstMessageTimeout = DefaultFirstMessageTimeout
	}
	largest := int64(cfg.Limits.Largest())
	g := &Gate{cfg: cfg, limits: cfg.Limits, codec: &gateCodec{inner: encoding.GetCodecV2("proto"), limits: cfg.Limits, refused: cfg.Refused, budget: cfg.Budget},
		silent:    auth.NewThrottle(auth.ThrottleConfig{Failures: 1, Per: silentPenalty, Now: cfg.Now}),
		openPeers: make(map[openPeer]struct{})}
	g.open[classHealth] = inflight.New(openHealthReads * largest)
	g.open[classReflection] = inflight.New(openReflectionReads * largest)
	g.open[classNext] = inflight.New(openNextReads * largest)
	return g
}

// ServerOptions returns the options that install the gate: the tap handler,
// the codec, the interceptors and the server's bound on one message.
func (g *Gate) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(g.Tap),
		grpc.ForceServerCodecV2(g.codec),
		grpc.MaxRecvMsgSize(g.limits.Largest()),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}

// ServerOptions returns a Gate's options with no throttle, no budget and
// the default limits.
func ServerOptions(a *auth.Authenticator) []grpc.ServerOption {
	return NewGate(GateConfig{Auth: a}).ServerOptions()
}

// Tap is the gate's grpc.InTapHandle. ctx carries the call's metadata and
// peer; nothing of its message has been read.
func (g *Gate) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	p, _ := peer.FromContext(ctx)
	piped := p != nil && p.Addr != nil && p.Addr.Network() == portmux.PipeNetwork
	addr := ""
	if p != nil && p.Addr != nil && !piped {
		addr = p.Addr.String()
	}
	_, open, _ := required(info.FullMethodName)
	if open {
		if g.cfg.Conns != nil && addr != "" {
			g.cfg.Conns.Touch(p.Addr)
		}
		return g.tapOpen(ctx, info.FullMethodName)
	}
	if err := Authorize(ctx, g.cfg.Auth, info.FullMethodName); err != nil {
		// Only a token presented and wrong is a guess, and only a guess is
		// throttled: a right token passes whatever its address did, and a
		// missing one (a misconfigured client) is not counted.
		if _, present := bearer(ctx); present && status.Code(err) == codes.Unauthenticated && g.cfg.Throttle != nil && addr != "" {
			client := g.clientAddr(ctx, addr)
			if wait, throttled := g.cfg.Throttle.Failure(client); throttled {
				g.refused(connlimit.ReasonThrottled)
				g.cfg.Auth.Denied(ctx, "grpc", info.FullMethodName, "throttled after failed tokens", client)
				return ctx, status.Errorf(codes.ResourceExhausted,
					"too many failed authentications from this address: retry in %s", wait)
			}
		}
		return ctx, err
	}
	if g.cfg.Conns != nil && addr != "" {
		g.cfg.Conns.Authenticated(p.Addr)
	}
	if g.cfg.Budget == nil || piped {
		return ctx, nil
	}
	release, ok := g.cfg.Budget.TryAcquire(int64(g.limits.For(info.FullMethodName)))
	if !ok {
		g.refused(connlimit.ReasonReadBudget)
		return ctx, status.Errorf(codes.Unavailable,
			"the server is reading as many requests as its memory budget allows (%d bytes): retry shortly", g.cfg.Budget.Size())
	}
	// The stream's context ends with the call, however it ends.
	context.AfterFunc(ctx, release)
	return ctx, nil
}

// clientAddr returns the client address of a call from peer addr, read
// through trusted proxies' forwarding metadata.
func (g *Gate) clientAddr(ctx context.Context, addr string) string {
	if g.cfg.Proxies.Len() == 0 {
		return addr
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return g.cfg.Proxies.ClientAddr(addr, md.Get)
}

// refused reports a refusal.
func (g *Gate) refused(reason string) {
	if g.cfg.Refused != nil {
		g.cfg.Refused(reason)
	}
}

// openReadKey holds, in the context of a call that needs no token, its
// reservation from the open budget while its first message is read.
type openReadKey struct{}

func (g *Gate) tapOpen(ctx context.Context, fullMethod string) (context.Context, error) {
	class := classReflection
	if strings.HasPrefix(fullMethod, prefixHealth) {
		class = classHealth
	}
	ip := g.openPeerKey(ctx)
	if ip != "" {
		if wait, ok := g.silent.Allow(ip); !ok {
			g.refused(connlimit.ReasonOpenCalls)
			return ctx, status.Errorf(codes.Unavailable,
				"this address opened an unauthenticated call (health, reflection) and sent no message: retry in %s", wait)
		}
	}
	release, err := g.acquireOpen(ctx, class)
	if err != nil {
		return ctx, err
	}
	// The first message must come soon: the reservation is not held for
	// a client that sends headers and nothing more.
	ctx, cancel := context.WithCancelCause(ctx)
	var state atomic.Int32 // 0 waiting, 1 read, 2 timed out
	timer := time.AfterFunc(g.cfg.FirstMessageTimeout, func() {
		if !state.CompareAndSwap(0, 2) {
			return
		}
		release()
		g.refused(connlimit.ReasonFirstMessageTimeout)
		if ip != "" {
			g.silent.Fail(ip)
		}
		cancel(errFirstMessageTimeout)
	})
	read := func() {
		if state.CompareAndSwap(0, 1) {
			timer.Stop()
		}
		release()
	}
	context.AfterFunc(ctx, read)
	return context.WithValue(ctx, openReadKey{}, read), nil
}

// errFirstMessageTimeout is why a call that sent no first message in time
// was cancelled.
var errFirstMessageTimeout = errors.New("the call sent no message within the first-message timeout")

// acquireOpen reserves the read of one message of a call that needs no
// token, of class: the client address's one slot in the class, then the
// largest message from the class's budget. The release is idempotent.
func (g *Gate) acquireOpen(ctx context.Context, class openClass) (func(), error) {
	key := openPeer{ip: g.openPeerKey(ctx), class: class}
	if key.ip != "" {
		g.openMu.Lock()
		_, held := g.openPeers[key]
		if !held {
			g.openPeers[key] = struct{}{}
		}
		g.openMu.Unlock()
		if held {
			g.refused(connlimit.ReasonOpenCalls)
			return nil, status.Error(codes.Unavailable, "this address already has an unauthenticated call (health, reflection) being read: retry")
		}
	}
	releaseBytes, ok := g.open[class].TryAcquire(int64(g.limits.Largest()))
	if !ok {
		g.releasePeer(key)
		g.refused(connlimit.ReasonOpenCalls)
		return nil, status.Error(codes.Unavailable, "too many unauthenticated calls (health, reflection) being read at once: retry")
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			releaseBytes()
			g.releasePeer(key)
		})
	}, nil
}

func (g *Gate) releasePeer(key openPeer) {
	if key.ip == "" {
		return
	}
	g.openMu.Lock()
	delete(g.openPeers, key)
	g.openMu.Unlock()
}

// openPeerKey returns the client address a call is counted under for the
// per-address cap on open reads: its IP, or an IPv6 address's /64, as the
// throttle counts it (auth.ThrottleKey); "" for the in-process pipe (calls
// of the HTTP/JSON API, whose guard bounds them) and for a call without a
// peer.
func (g *Gate) openPeerKey(ctx context.Context) string {
	p, _ := peer.FromContext(ctx)
	if p == nil || p.Addr == nil || p.Addr.Network() == portmux.PipeNetwork {
		return ""
	}
	return auth.ThrottleKey(g.clientAddr(ctx, p.Addr.String()))
}

// releaseOpenRead gives back a call's open reservation, once its message
// has been read.
func releaseOpenRead(ctx context.Context) {
	if release, ok := ctx.Value(openReadKey{}).(func()); ok {
		release()
	}
}

// authorize checks the token again behind the tap: a server built with
// these interceptors but without the tap is still closed.
func (g *Gate) authorize(ctx context.Context, fullMethod string) error {
	return Authorize(ctx, g.cfg.Auth, fullMethod)
}

func (g *Gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	// The request has been read and decoded by now.
	releaseOpenRead(ctx)
	defer g.codec.release(req)
	if err := g.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	if err := g.codec.take(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *Gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := g.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	cs := &checkedStream{ServerStream: ss, codec: g.codec}
	if _, open, _ := required(info.FullMethod); open {
		cs.open = g
		cs.release, _ = ss.Context().Value(openReadKey{}).(func())
	}
	return handler(srv, cs)
}

// checkedStream turns what the codec found in each received message into
// the call's status and, for a call that needs no token, reserves each
// message's read (the first one's reservation is the tap's; later ones come
// from the budget of later messages).
type checkedStream struct {
	grpc.ServerStream
	codec   *gateCodec
	open    *Gate
	release func()
}

func (s *checkedStream) RecvMsg(m any) error {
	if s.open != nil {
		if s.release == nil {
			r, err := s.open.acquireOpen(s.Context(), classNext)
			if err != nil {
				return err
			}
			s.release = r
		}
		defer func() { s.release(); s.release = nil }()
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.take(m)
}

// gateCodec is the proto codec, except that a request it cannot decode is
// the client's error. gRPC answers Internal when a server codec fails, which
// tells clients to retry what can never succeed, and leaves the error before
// any interceptor runs. So Unmarshal records the error against the message
// and succeeds; the interceptor, which gets that very message next, takes
// the error back and answers InvalidArgument (or ResourceExhausted for a
// message over its method's limit, which is not decoded at all).
type gateCodec struct {
	inner  encoding.CodecV2
	limits Limits
	errs   sync.Map // request message (a pointer) → error
	// budget, when set, is reserved from for what decoding a publish
	// request costs; held maps its message (a pointer) to the release.
	budget *inflight.Budget
	held   sync.Map
	// refused is GateConfig.Refused.
	refused func(reason string)
}

func (c *gateCodec) Name() string { return c.inner.Name() }

func (c *gateCodec) Marshal(v any) (mem.BufferSlice, error) { return c.inner.Marshal(v) }

func (c *gateCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if n, limit := data.Len(), c.limits.forMessage(v); n > limit {
		if c.refused != nil {
			c.refused(connlimit.ReasonTooLarge)
		}
		c.errs.Store(v, status.Errorf(codes.ResourceExhausted,
			"the request message is %d bytes; this method takes at most %d", n, limit))
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.inner.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := c.reserveDecoding(buf.ReadOnlyData(), v); err != nil {
		c.errs.Store(v, err)
		return nil
	}
	if err := proto.Unmarshal(buf.ReadOnlyData(), m); err != nil {
		c.errs.Store(v, status.Error(codes.InvalidArgument, "the request message is not valid protobuf: "+describeDecode(err)))
	}
	return nil
}

// reserveDecoding checks a publish request's encoding before it is
// decoded: an event's data over MaxDataWireBytes is refused, and what
// decoding will cost (decoding multiplies: a value in an event's data
// becomes a message of its own) is reserved from the budget until the call
// ends (held), or refused when it does not fit.
func (c *gateCodec) reserveDecoding(b []byte, v any) error {
	var batch bool
	switch v.(type) {
	case *webhooksv1.PublishBatchRequest:
		batch = true
	case *webhooksv1.PublishRequest:
	default:
		return nil
	}
	cost, err := publishCost(b, batch)
	if err != nil {
		c.refusedFor(connlimit.ReasonTooLarge)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if c.budget == nil {
		return nil
	}
	if cost > c.budget.Size() {
		c.refusedFor(connlimit.ReasonTooLarge)
		return status.Errorf(codes.ResourceExhausted,
			"decoded, the request would take about %d MiB, more than the server decodes at once (%d MiB): send fewer events, or fewer values in each", cost>>20, c.budget.Size()>>20)
	}
	release, ok := c.budget.TryAcquire(cost)
	if !ok {
		c.refusedFor(connlimit.ReasonReadBudget)
		return status.Errorf(codes.Unavailable,
			"the server is decoding as many requests as its memory budget allows (%d bytes): retry shortly", c.budget.Size())
	}
	c.held.Store(v, release)
	return nil
}

func (c *gateCodec) refusedFor(reason string) {
	if c.refused != nil {
		c.refused(reason)
	}
}

// release gives back the decoding reservation of m, if it holds one.
func (c *gateCodec) release(m any) {
	if r, ok := c.held.LoadAndDelete(m); ok {
		r.(func())()
	}
}

// take returns (and forgets) the error Unmarshal recorded for m, if any.
func (c *gateCodec) take(m any) error {
	if err, ok := c.errs.LoadAndDelete(m); ok {
		return err.(error)
	}
	return nil
}

// describeDecode names what was wrong, in words a client can act on.
func describeDecode(err error) string {
	msg := err.Error()
	switch {
	case containsAny(msg, "invalid UTF-8"):
		return "a string field holds invalid UTF-8 (" + msg + ")"
	case containsAny(msg, "recursion", "depth"):
		return "it nests too deeply (" + msg + ")"
	default:
		return "truncated or garbled (" + msg + ")"
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
