package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Proxy is a forward proxy every delivery is tunnelled through with HTTP
// CONNECT: for receivers whose firewalls admit only known source addresses,
// the proxy's.
//
// The SSRF guard still decides: the receiver's name is resolved here and
// each address checked against the Policy before the CONNECT, which then
// names that address (never the name), so the proxy can neither resolve the
// name to an internal address nor be sent to one. The proxy's own address is
// exempt from the deny list (it usually lives on a private network): it is
// the operator's configuration, never a tenant's. Every delivery goes through
// CONNECT, http:// ones too, so that no proxy ever resolves a receiver's name.
type Proxy struct {
	// Addr is the proxy's host:port.
	Addr string
	// Username and Password, when set, go in Proxy-Authorization (Basic).
	Username, Password string
}

// ParseProxy reads the -egress-proxy URL (http://host:port; credentials
// never in it, since a flag shows in process listings) and, when
// credentialsFile is set, the "user:password" line in it.
func ParseProxy(raw, credentialsFile string) (*Proxy, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	switch {
	case u.Scheme != "http":
		return nil, fmt.Errorf("%q: want http://host:port (the proxy is spoken to in plain HTTP; the tunnel through it carries TLS to https receivers)", raw)
	case u.User != nil:
		return nil, errors.New("credentials do not belong in the URL, which shows in process listings: put user:password in the credentials file")
	case u.Hostname() == "" || u.Port() == "":
		return nil, fmt.Errorf("%q: want http://host:port, with the port", raw)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return nil, fmt.Errorf("%q: want http://host:port, nothing after it", raw)
	}
	if _, err := strconv.ParseUint(u.Port(), 10, 16); err != nil {
		return nil, fmt.Errorf("%q: bad port", raw)
	}
	p := &Proxy{Addr: u.Host}
	if credentialsFile != "" {
		b, err := os.ReadFile(credentialsFile)
		if err != nil {
			return nil, fmt.Errorf("credentials file: %w", err)
		}
		line := strings.TrimSpace(string(b))
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" || strings.ContainsAny(line, "\r\n") {
			return nil, fmt.Errorf("credentials file %s: want one line user:password", credentialsFile)
		}
		p.Username, p.Password = user, pass
	}
	return p, nil
}

// ProxyError is a failure of the proxy rather than of the receiver: the
// proxy could not be reached, refused the CONNECT, or answered something
// that is not HTTP. A delivery that meets one is retried like any connection
// failure (it never wraps ErrBlocked). Its text names neither the proxy's
// address nor its credentials: it may reach the endpoint's owner.
type ProxyError struct {
	// Op is what failed: "dial", "CONNECT" or "answer".
	Op string
	// Status is the proxy's answer to CONNECT when it was not 200.
	Status string
	Err    error
}

func (e *ProxyError) Error() string {
	if e.Status != "" {
		return "egress proxy refused CONNECT: " + e.Status
	}
	if e.Timeout() {
		return "egress proxy: " + e.Op + ": no answer in time"
	}
	msg := e.Err.Error()
	// net.OpError spells out the proxy's address; its cause does not.
	if oe, ok := errors.AsType[*net.OpError](e.Err); ok && oe.Err != nil {
		msg = oe.Err.Error()
	}
	return "egress proxy: " + e.Op + ": " + msg
}

func (e *ProxyError) Unwrap() error { return e.Err }

// Timeout reports whether the proxy did not answer in time, so a delivery's
// attempt is classed a timeout.
func (e *ProxyError) Timeout() bool {
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// proxyDialer dials the receiver at addr through p: the name resolved here,
// each address checked, then a tunnel to the first allowed address that the
// proxy opens.
type proxyDialer struct {
	proxy    *Proxy
	policy   Policy
	resolver *net.Resolver
	dialer   *net.Dialer // to the proxy; no policy
}

func (d *proxyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: ErrBlocked}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		resolver := d.resolver
		if resolver == nil {
			resolver = net.DefaultResolver
		}
		if addrs, err = resolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for _, ip := range addrs {
		if !d.policy.Allowed(ip) {
			continue
		}
		conn, err := d.connect(ctx, netip.AddrPortFrom(ip.Unmap().WithZone(""), mustPort(port)).String())
		if err == nil {
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr == nil {
		// Every address refused by the policy: the same error, without the
		// address, as the direct dial's.
		return nil, &net.OpError{Op: "dial", Net: network, Err: ErrBlocked}
	}
	return nil, lastErr
}

func mustPort(s string) uint16 {
	n, _ := strconv.ParseUint(s, 10, 16)
	return uint16(n)
}

// connect opens a tunnel to target (an IP:port) through the proxy. The
// handshake is bounded by ctx, whose deadline is the request's.
func (d *proxyDialer) connect(ctx context.Context, target string) (net.Conn, error) {
	conn, err := d.dialer.DialContext(ctx, "tcp", d.proxy.Addr)
	if err != nil {
		return nil, &ProxyError{Op: "dial", Err: err}
	}
	// ctx ending interrupts the handshake's reads and writes.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		_ = conn.SetDeadline(dl)
	}
	tunnel, err := d.handshake(conn, target)
	if !stop() || err != nil {
		_ = conn.Close()
		// Ours, not the proxy's: a shutdown or the request's deadline (the
		// connection's, which may fire a moment before ctx's), which the
		// caller tells apart by the context's error.
		switch {
		case ctx.Err() != nil:
			return nil, &ProxyError{Op: "CONNECT", Err: ctx.Err()}
		case hasDeadline && !time.Now().Before(dl):
			return nil, &ProxyError{Op: "CONNECT", Err: context.DeadlineExceeded}
		}
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return tunnel, nil
}

func (d *proxyDialer) handshake(conn net.Conn, target string) (net.Conn, error) {
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: target},
		Host:   target,
		Header: http.Header{},
	}
	if d.proxy.Username != "" {
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(d.proxy.Username+":"+d.proxy.Password)))
	}
	if err := req.Write(conn); err != nil {
		return nil, &ProxyError{Op: "CONNECT", Err: err}
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, &ProxyError{Op: "answer", Err: fmt.Errorf("not an HTTP answer to CONNECT: %w", err)}
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &ProxyError{Op: "CONNECT", Status: resp.Status, Err: errors.New(resp.Status)}
	}
	if br.Buffered() > 0 {
		// Bytes after the 200 belong to the tunnel: the receiver spoke first.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn reads what the handshake's reader buffered before the rest.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
