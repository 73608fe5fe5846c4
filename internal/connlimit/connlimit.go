// Package connlimit bounds what clients can make a listening port hold, so
// that no one client can lock the others out of it:
//
//   - a cap per client address (its IP, an IPv6 address's /64, as
//     internal/auth's throttle keys it): a connection beyond it is closed as
//     soon as it is accepted, so one host cannot take the port;
//   - a cap on the port's connections as a whole, the last resort: beyond
//     it new connections wait in the kernel's listen backlog until one
//     closes;
//   - a short read deadline on connections that have not authenticated:
//     until a request on it has presented a valid token, a connection may
//     be idle, or take to send its request, at most UnauthenticatedTimeout
//     (the server's own deadlines still apply when shorter). Once
//     authenticated (MarkAuthenticated for HTTP, Listener.Authenticated for
//     gRPC), the server's own deadlines apply again.
//
// Addresses that Exempt names (trusted reverse proxies, whose connections
// carry many clients) count only towards the port's cap.
package connlimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons the Listener refuses or cuts off a connection, as Config.Refused
// reports them.
const (
	// ReasonAddressConnections: the client address held its cap; the new
	// connection was closed at once.
	ReasonAddressConnections = "address_connections"
	// ReasonMaxConnections: the port held its cap; the new connection
	// waited in the listen backlog.
	ReasonMaxConnections = "max_connections"
	// ReasonUnauthenticatedTimeout: a connection that had not authenticated
	// was closed when its short deadline ran out.
	ReasonUnauthenticatedTimeout = "unauthenticated_timeout"
)

// Reasons the ports refuse a request for, beside the connection ones above:
// the surfaces that refuse it (internal/httpapi, internal/grpcapi,
// internal/auth) report them under these names.
const (
	// ReasonThrottled: the client address sent too many failed tokens.
	ReasonThrottled = "throttled"
	// ReasonReadBudget: the requests being read held the whole read budget.
	ReasonReadBudget = "read_budget"
	// ReasonTooLarge: the request was over its method's size limit.
	ReasonTooLarge = "too_large"
	// ReasonOpenCalls: the budget of calls that need no token (gRPC health,
	// reflection) being read was taken.
	ReasonOpenCalls = "open_calls"
	// ReasonFirstMessageTimeout: a call that needs no token sent no message
	// in time and was cancelled.
	ReasonFirstMessageTimeout = "first_message_timeout"
)

// Reasons lists every reason, for metrics that show each from the start.
func Reasons() []string {
	return []string{ReasonAddressConnections, ReasonMaxConnections, ReasonUnauthenticatedTimeout,
		ReasonThrottled, ReasonReadBudget, ReasonTooLarge, ReasonOpenCalls, ReasonFirstMessageTimeout}
}

// Ports are the port names refusals are counted under.
func Ports() []string { return []string{"api", "ops"} }

// Config configures a Listener.
type Config struct {
	// MaxConns bounds the port's connections; 0: no bound.
	MaxConns int
	// MaxPerAddress bounds one client address's connections; 0: no bound.
	MaxPerAddress int
	// UnauthenticatedTimeout bounds how long a connection that has not
	// authenticated may be idle or take to send its request; 0: no bound.
	UnauthenticatedTimeout time.Duration
	// Exempt reports whether a client address is exempt from MaxPerAddress
	// (a trusted proxy); nil: none is.
	Exempt func(netip.Addr) bool
	// Refused is told each refusal, by reason (the Reason constants); nil:
	// nobody is.
	Refused func(reason string)
}

// Listener is a net.Listener enforcing a Config. It is safe for concurrent
// use.
type Listener struct {
	net.Listener
	cfg   Config
	slots chan struct{} // nil: no port-wide cap
	done  chan struct{}
	once  sync.Once

	mu       sync.Mutex
	perAddr  map[string]int
	byRemote map[string]*Conn
}

// Listen wraps inner.
func Listen(inner net.Listener, cfg Config) *Listener {
	l := &Listener{Listener: inner, cfg: cfg, done: make(chan struct{}),
		perAddr: map[string]int{}, byRemote: map[string]*Conn{}}
	if cfg.MaxConns > 0 {
		l.slots = make(chan struct{}, cfg.MaxConns)
	}
	return l
}

func (l *Listener) refused(reason string) {
	if l.cfg.Refused != nil {
		l.cfg.Refused(reason)
	}
}

// Accept waits for a free slot, then returns the next connection whose
// address is under its cap, closing those that are not.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			default:
				l.refused(ReasonMaxConnections)
				select {
				case l.slots <- struct{}{}:
				case <-l.done:
					return nil, net.ErrClosed
				}
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.release()
			return nil, err
		}
		key, exempt := l.key(c.RemoteAddr())
		l.mu.Lock()
		if !exempt && l.cfg.MaxPerAddress > 0 && l.perAddr[key] >= l.cfg.MaxPerAddress {
			l.mu.Unlock()
			l.release()
			_ = c.Close()
			l.refused(ReasonAddressConnections)
			continue
		}
		conn := &Conn{Conn: c, l: l, key: key, remote: c.RemoteAddr().String()}
		if !exempt {
			l.perAddr[key]++
		} else {
			conn.key = ""
		}
		l.byRemote[conn.remote] = conn
		l.mu.Unlock()
		if l.cfg.UnauthenticatedTimeout <= 0 {
			conn.authed.Store(true)
		}
		// Starts the unauthenticated connection's clock.
		_ = conn.SetReadDeadline(time.Time{})
		return conn, nil
	}
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *Listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// key returns the client address a connection is counted under, and
// whether it is exempt from the per-address cap.
func (l *Listener) key(addr net.Addr) (string, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return addr.String(), false
	}
	ip := ap.Addr().Unmap()
	if l.cfg.Exempt != nil && l.cfg.Exempt(ip) {
		return "", true
	}
	return Key(ip), false
}

// Key is the key a client address is counted under: its IP, or an IPv6
// address's /64, which one client usually holds whole. internal/auth's
// throttle keys addresses the same way.
func Key(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Open is how many connections the listener holds.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byRemote)
}

// lookup returns the open connection whose remote address is addr.
func (l *Listener) lookup(addr net.Addr) *Conn {
	if addr == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byRemote[addr.String()]
}

// Authenticated marks the connection from addr (a call's peer address) as
// authenticated: the server's own deadlines apply to it from now on. For
// protocols whose handlers do not see the connection (gRPC).
func (l *Listener) Authenticated(addr net.Addr) {
	if c := l.lookup(addr); c != nil {
		c.markAuthenticated()
	}
}

// Touch gives the unauthenticated connection from addr a fresh
// UnauthenticatedTimeout: a call that needs no token (gRPC health) was
// answered on it, so a health checker that calls more often than that
// keeps its connection.
func (l *Listener) Touch(addr net.Addr) {
	if c := l.lookup(addr); c != nil {
		c.touch()
	}
}

func (l *Listener) closed(c *Conn) {
	l.mu.Lock()
	if c.key != "" {
		if l.perAddr[c.key]--; l.perAddr[c.key] <= 0 {
			delete(l.perAddr, c.key)
		}
	}
	if l.byRemote[c.remote] == c {
		delete(l.byRemote, c.remote)
	}
	l.mu.Unlock()
	l.release()
}

// Conn is a connection a Listener accepted.
type Conn struct {
	net.Conn
	l      *Listener
	key    string // "" when exempt
	remote string
	authed atomic.Bool
	once   sync.Once

	mu sync.Mutex
	// wanted is the read deadline the server asked for; clamped says the
	// deadline in force is the unauthenticated one instead.
	wanted  time.Time
	clamped bool
	cut     bool // counted as cut off already
}

// Close closes the connection and frees its slots.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.closed(c) })
	return err
}

// CloseWrite shuts the writing side down, as *net.TCPConn does: net/http
// calls it to send its last response (a 401, a 431) before closing, so that
// the client reads it instead of a reset.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Read reads, and counts a connection cut off by the unauthenticated
// deadline.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !c.authed.Load() {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			c.mu.Lock()
			count := c.clamped && !c.cut
			c.cut = c.cut || count
			c.mu.Unlock()
			if count {
				c.l.refused(ReasonUnauthenticatedTimeout)
			}
		}
	}
	return n, err
}

// SetDeadline sets both deadlines, the read one bounded while the
// connection has not authenticated.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline, at most UnauthenticatedTimeout
// from now while the connection has not authenticated.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wanted = t
	return c.Conn.SetReadDeadline(c.effective(t))
}

// effective is the deadline to set for t; c.mu is held.
func (c *Conn) effective(t time.Time) time.Time {
	c.clamped = false
	if c.authed.Load() {
		return t
	}
	limit := time.Now().Add(c.l.cfg.UnauthenticatedTimeout)
	if t.IsZero() || t.After(limit) {
		c.clamped = true
		return limit
	}
	return t
}

func (c *Conn) markAuthenticated() {
	if c.authed.Swap(true) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clamped = false
	_ = c.Conn.SetReadDeadline(c.wanted)
}

func (c *Conn) touch() {
	if c.authed.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.Conn.SetReadDeadline(c.effective(c.wanted))
}

// Authenticated reports whether a request on the connection presented a
// valid token.
func (c *Conn) Authenticated() bool { return c.authed.Load() }

// unwrapper is a connection wrapping another: *tls.Conn, internal/portmux's
// connections.
type unwrapper interface{ NetConn() net.Conn }

// Of returns the Listener's Conn beneath c, if c is one or wraps one.
func Of(c net.Conn) *Conn {
	for range 8 {
		switch v := c.(type) {
		case *Conn:
			return v
		case unwrapper:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext: it makes the connection
// known to MarkAuthenticated.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if conn := Of(c); conn != nil {
		return context.WithValue(ctx, connKey{}, conn)
	}
	return ctx
}

// MarkAuthenticated marks the connection a request came on (its context,
// under an http.Server with ConnContext) as authenticated: from now on the
// server's own deadlines apply to it. Call it once the request's token has
// been checked, before its body is read.
func MarkAuthenticated(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*Conn); ok {
		c.markAuthenticated()
	}
}

// CloseOnDenied closes the connection after any 401 or 403 that h answers,
// instead of reading the rest of the request's body to keep it alive: a
// client without a valid token keeps nothing open by sending slowly.
func CloseOnDenied(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&closeOnDenied{ResponseWriter: w}, r)
	})
}

type closeOnDenied struct {
	http.ResponseWriter
	wrote bool
}

func (w *closeOnDenied) WriteHeader(code int) {
	if !w.wrote && (code == http.StatusUnauthorized || code == http.StatusForbidden) {
		w.Header().Set("Connection", "close")
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeOnDenied) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush flushes the writer beneath, if it can.
func (w *closeOnDenied) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer beneath.
func (w *closeOnDenied) Unwrap() http.ResponseWriter { return w.ResponseWriter }
