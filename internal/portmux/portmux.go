// Package portmux serves gRPC and HTTP/1.1 on one port: it accepts the
// port's connections and hands each to the gRPC server or to the HTTP server
// by what the client speaks, before either reads a byte of it.
//
//   - Over TLS it terminates the handshake itself and decides by ALPN. It
//     prefers "http/1.1" to "h2", so a client offering both (curl, browsers,
//     Go's http.Client) gets HTTP/1.1 and the JSON API, while a gRPC client,
//     which offers only "h2", gets gRPC. The gRPC server then needs Creds,
//     which tells it the connection is already secure.
//   - In plaintext it reads the first bytes: the HTTP/2 connection preface
//     (what a gRPC client sends first) goes to gRPC, anything else to HTTP.
//
// A connection that says nothing within the handshake timeout is closed.
// The gRPC server keeps its own transport: nothing of this package sits in
// its data path after the first bytes.
package portmux

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// http2Preface is what every HTTP/2 client, so every gRPC client, sends
// first.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HandshakeTimeout bounds the TLS handshake and the first bytes.
const HandshakeTimeout = 10 * time.Second

// Mux splits one listener into a gRPC one and an HTTP one.
type Mux struct {
	root  net.Listener
	tls   *tls.Config
	grpc  *listener
	http  *listener
	wg    sync.WaitGroup
	close sync.Once
}

// New returns a Mux over root. tlsConfig, if set, is the port's TLS
// configuration (certificates, client authentication); the Mux terminates
// TLS with it.
func New(root net.Listener, tlsConfig *tls.Config) *Mux {
	m := &Mux{root: root, grpc: newListener(root.Addr()), http: newListener(root.Addr())}
	if tlsConfig != nil {
		m.tls = tlsConfig.Clone()
		// HTTP/1.1 first: the server's order decides, and a gRPC client
		// offers only h2.
		m.tls.NextProtos = []string{"http/1.1", "h2"}
	}
	return m
}

// GRPC is the listener the gRPC server serves.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// HTTP is the listener the HTTP server serves.
func (m *Mux) HTTP() net.Listener { return m.http }

// Serve accepts connections until the root listener is closed (Close), then
// returns nil; any other accept error is returned.
func (m *Mux) Serve() error {
	defer m.Close()
	for {
		c, err := m.root.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		m.wg.Go(func() { m.route(c) })
	}
}

// Close closes the root listener and both listeners it feeds, and waits for
// the connections being routed.
func (m *Mux) Close() error {
	var err error
	m.close.Do(func() {
		err = m.root.Close()
		m.wg.Wait()
		m.grpc.shut()
		m.http.shut()
	})
	return err
}

func (m *Mux) route(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(HandshakeTimeout))
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			m.grpc.deliver(tc)
		} else {
			m.http.deliver(tc)
		}
		return
	}
	br := bufio.NewReaderSize(c, len(http2Preface))
	first, err := br.Peek(len(http2Preface))
	if err != nil && len(first) == 0 {
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br}
	if bytes.Equal(first, []byte(http2Preface)) {
		m.grpc.deliver(pc)
	} else {
		m.http.deliver(pc)
	}
}

// peekedConn replays the bytes read to route it.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite shuts the writing side down, when the connection beneath can:
// net/http sends its last response so (a 401, a 431) before it closes.
func (c *peekedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection beneath, as *tls.Conn has it.
func (c *peekedConn) NetConn() net.Conn { return c.Conn }

// listener is a net.Listener fed by the Mux.
type listener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newListener(addr net.Addr) *listener {
	return &listener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *listener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; the Mux keeps the port (Mux.Close closes it).
func (l *listener) Close() error { l.shut(); return nil }

func (l *listener) shut() { l.once.Do(func() { close(l.done) }) }

func (l *listener) Addr() net.Addr { return l.addr }

// Creds are the gRPC server's transport credentials behind a Mux: the Mux
// has done the TLS handshake (or there is none), so they only report what
// it established, for peer.AuthInfo.
func Creds() credentials.TransportCredentials { return creds{} }

type creds struct{}

func (creds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc, ok := c.(*tls.Conn); ok {
		return tc, credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, insecureInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (creds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("portmux: server credentials only")
}

func (creds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "portmux"}
}

func (creds) Clone() credentials.TransportCredentials { return creds{} }

func (creds) OverrideServerName(string) error { return nil }

type insecureInfo struct{ credentials.CommonAuthInfo }

func (insecureInfo) AuthType() string { return "insecure" }

// Pipe is an in-process listener: the HTTP API's way to the gRPC server
// without a socket, TLS or client certificate of its own (the HTTP client's
// were checked on the port).
type Pipe struct{ *listener }

// NewPipe returns an in-process listener.
func NewPipe() *Pipe { return &Pipe{newListener(pipeAddr{})} }

// Dial opens a connection to the Pipe's server.
func (p *Pipe) Dial(ctx context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PipeNetwork is the network of a Pipe's addresses: a gRPC call from the
// HTTP API has a peer of this network.
const PipeNetwork = "httpapi"

type pipeAddr struct{}

func (pipeAddr) Network() string { return PipeNetwork }
func (pipeAddr) String() string  { return "httpapi" }
