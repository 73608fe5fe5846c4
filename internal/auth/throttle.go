package auth

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ThrottleConfig configures a Throttle.
type ThrottleConfig struct {
	// Failures is how many failed attempts an address may make in a burst;
	// after that it earns one more every Per/Failures. 0 means 10.
	Failures int
	// Per is how long an address takes to earn back Failures attempts. 0
	// means a minute.
	Per time.Duration
	// MaxAddresses bounds how many addresses are remembered at once; beyond
	// it the one that failed longest ago is forgotten. 0 means 10,000 (about
	// a megabyte).
	MaxAddresses int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Throttle limits failed authentications (a wrong login token, an unknown
// bearer token) per client address with a token bucket: an address may fail
// Failures times at once, then once per Per/Failures. Only failures count,
// and only failures are refused: a valid token passes whether or not its
// address is throttled, so a guesser sharing an address (a NAT, a reverse
// proxy's) cannot lock its neighbours out, while its own guesses stay
// throttled. Answering a right token tells a guesser nothing it could use,
// because tokens are too strong to guess (CheckStrength). Success
// costs nothing and forgets nothing.
//
// Callers check the token first, then, only when it is wrong, call Failure,
// which both answers whether to refuse the attempt as throttled and counts
// it.
//
// Addresses are keyed by IP (the port is ignored) and IPv6 addresses by their
// /64, which one client usually holds whole. Memory is bounded by
// MaxAddresses. It is safe for concurrent use.
type Throttle struct {
	cfg   ThrottleConfig
	rate  float64 // attempts earned per second
	mu    sync.Mutex
	byKey map[string]*list.Element
	lru   list.List // of *bucket, most recently failed first
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time
}

// NewThrottle returns a Throttle.
func NewThrottle(cfg ThrottleConfig) *Throttle {
	if cfg.Failures <= 0 {
		cfg.Failures = 10
	}
	if cfg.Per <= 0 {
		cfg.Per = time.Minute
	}
	if cfg.MaxAddresses <= 0 {
		cfg.MaxAddresses = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Throttle{cfg: cfg, rate: float64(cfg.Failures) / cfg.Per.Seconds(), byKey: map[string]*list.Element{}}
}

// ThrottleKey is the key an address (host:port, or a bare IP) is counted
// under: its IP, or an IPv6 address's /64.
func ThrottleKey(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// refill brings b's tokens up to now, and reports whether it is full (so
// holds nothing worth remembering).
func (t *Throttle) refill(b *bucket, now time.Time) bool {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(t.cfg.Failures), b.tokens+d.Seconds()*t.rate)
		b.at = now
	}
	return b.tokens >= float64(t.cfg.Failures)
}

// Allow reports whether addr may attempt to authenticate now. When it may
// not, retryAfter says when it may try again.
func (t *Throttle) Allow(addr string) (retryAfter time.Duration, ok bool) {
	key := ThrottleKey(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	e, found := t.byKey[key]
	if !found {
		return 0, true
	}
	b := e.Value.(*bucket)
	if t.refill(b, t.cfg.Now()) {
		t.lru.Remove(e)
		delete(t.byKey, key)
		return 0, true
	}
	if b.tokens >= 1 {
		return 0, true
	}
	wait := time.Duration((1 - b.tokens) / t.rate * float64(time.Second))
	return max(wait.Round(time.Second), time.Second), false
}

// Failure is told a failed attempt from addr. When addr is throttled, it
// reports so (the attempt is to be refused as throttled, and costs no more
// than the refusal) with retryAfter saying when addr may try again;
// otherwise it counts the failure.
func (t *Throttle) Failure(addr string) (retryAfter time.Duration, throttled bool) {
	if wait, ok := t.Allow(addr); !ok {
		return wait, true
	}
	t.Fail(addr)
	return 0, false
}

// Fail records a failed attempt from addr.
func (t *Throttle) Fail(addr string) {
	key := ThrottleKey(addr)
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, found := t.byKey[key]
	if !found {
		if t.lru.Len() >= t.cfg.MaxAddresses {
			oldest := t.lru.Back()
			t.lru.Remove(oldest)
			delete(t.byKey, oldest.Value.(*bucket).key)
		}
		e = t.lru.PushFront(&bucket{key: key, tokens: float64(t.cfg.Failures), at: now})
		t.byKey[key] = e
	}
	b := e.Value.(*bucket)
	t.refill(b, now)
	b.tokens = max(b.tokens-1, 0)
	t.lru.MoveToFront(e)
}

// Len is how many addresses are remembered.
func (t *Throttle) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
