package portal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Session bounds.
const (
	DefaultTTL        = time.Hour
	MaxTTL            = 24 * time.Hour
	MaxAllowedOrigins = 10
)

// Access is what a session may do.
type Access string

// Accesses.
const (
	AccessRead   Access = "read"
	AccessManage Access = "manage"
)

// Field names of CreatePortalSession, as the API spells them.
const (
	FieldOwnerID        = "owner_id"
	FieldTTL            = "ttl"
	FieldAccess         = "access"
	FieldAllowedOrigins = "allowed_origins"
)

// SessionRequest asks for a one-time link.
type SessionRequest struct {
	OwnerID string
	// TTL: 0 means DefaultTTL. Malformed is set when the transport's value
	// was present but not a valid duration.
	TTL            time.Duration
	TTLMalformed   bool
	Access         Access
	AllowedOrigins []string
}

// Link is a one-time link into the portal.
type Link struct {
	URL       string
	ExpiresAt time.Time
}

// session is an opened link: what every page request is checked against.
type session struct {
	ownerID string
	access  Access
	origins []string
	expires time.Time
	// csrf is the form token of this session: derived from the cookie's
	// token, so it needs no storage and a page can only know it by having
	// been served to the session's browser.
	csrf string
}

func (s *session) canManage() bool { return s.access == AccessManage }

// sessions reads and writes portal_sessions.
type sessions struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// newToken is 32 random bytes, base64url: unguessable, safe in a URL.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashToken(tok string) []byte {
	h := sha256.Sum256([]byte(tok))
	return h[:]
}

// csrfToken derives a session's form token from its cookie token; the
// label keeps it from being the session hash stored in the database.
func csrfToken(sessionToken string) string {
	h := sha256.Sum256([]byte("dispatcher portal csrf\x00" + sessionToken))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func equalTokens(a, b string) bool {
	return len(a) == len(b) && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// validate checks a request the way the endpoint service checks its own:
// every bad field named, nothing written.
func validate(r *SessionRequest) error {
	var ve endpoint.ValidationError
	add := func(field, desc string) {
		ve.Violations = append(ve.Violations, endpoint.FieldViolation{Field: field, Description: desc})
	}
	var fe *webhook.FieldError
	if err := webhook.ValidateOwnerID(r.OwnerID); errors.As(err, &fe) {
		add(FieldOwnerID, fe.Reason)
	} else if err != nil {
		add(FieldOwnerID, "is not a valid owner id")
	}
	switch {
	case r.TTLMalformed:
		add(FieldTTL, "is not a valid duration")
	case r.TTL < 0:
		add(FieldTTL, "must not be negative")
	case r.TTL > MaxTTL:
		add(FieldTTL, "must be at most 24h")
	case r.TTL == 0:
		r.TTL = DefaultTTL
	case r.TTL < time.Minute:
		add(FieldTTL, "must be at least 1m (0 means the default, 1h)")
	}
	switch r.Access {
	case AccessRead, AccessManage:
	case "":
		add(FieldAccess, "must be set: read or manage")
	default:
		add(FieldAccess, "must be read or manage")
	}
	if len(r.AllowedOrigins) > MaxAllowedOrigins {
		add(FieldAllowedOrigins, "must hold at most "+strconv.Itoa(MaxAllowedOrigins)+" origins")
	}
	for i, o := range r.AllowedOrigins {
		if desc := originProblem(o); desc != "" {
			add(fmt.Sprintf("%s[%d]", FieldAllowedOrigins, i), desc)
		}
	}
	if len(ve.Violations) > 0 {
		return &ve
	}
	return nil
}

// originProblem says what is wrong with an allowed origin, or "". An origin
// goes into a CSP header as it is, so only scheme://host[:port] passes:
// nothing that could end the directive or add another.
func originProblem(o string) string {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "must be an origin: https://host or https://host:port"
	}
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return "must be an origin only: scheme, host and port, no path, query or user"
	}
	if strings.ContainsAny(o, " ;,'\"\\\t\r\n") || o != u.Scheme+"://"+u.Host {
		return "must be an origin in plain form, like https://app.example.com"
	}
	return ""
}

// create stores a new link and returns its token. Expired sessions are
// deleted on the way: creating sessions is rare, and the index makes the
// delete cheap.
func (s *sessions) create(ctx context.Context, r SessionRequest) (string, time.Time, error) {
	tok := newToken()
	expires := s.now().Add(r.TTL)
	origins := r.AllowedOrigins
	if origins == nil {
		origins = []string{}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM portal_sessions WHERE expires_at < $1`, s.now()); err != nil {
		return "", time.Time{}, fmt.Errorf("prune portal sessions: %w", err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO portal_sessions (link_hash, owner_id, access, allowed_origins, expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6)`, hashToken(tok), r.OwnerID, string(r.Access), origins, expires, s.now())
	if err != nil {
		return "", time.Time{}, fmt.Errorf("store portal session: %w", err)
	}
	return tok, expires, nil
}

// errNoSession: the link or cookie names no live session (spent, expired,
// or never issued: the pages do not say which).
var errNoSession = errors.New("no such session")

// open spends a link and starts its session, returning the cookie's token.
// One statement, so two browsers opening one link cannot both win.
func (s *sessions) open(ctx context.Context, linkToken string) (string, *session, error) {
	if linkToken == "" || len(linkToken) > 100 {
		return "", nil, errNoSession
	}
	tok := newToken()
	sess := &session{csrf: csrfToken(tok)}
	var access string
	err := s.pool.QueryRow(ctx, `UPDATE portal_sessions SET opened_at = $3, session_hash = $2
 WHERE link_hash = $1 AND opened_at IS NULL AND expires_at > $3
RETURNING owner_id, access, allowed_origins, expires_at`, hashToken(linkToken), hashToken(tok), s.now()).
		Scan(&sess.ownerID, &access, &sess.origins, &sess.expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, errNoSession
	}
	if err != nil {
		return "", nil, fmt.Errorf("open portal session: %w", err)
	}
	sess.access = Access(access)
	return tok, sess, nil
}

// lookup returns the live session of a cookie's token.
func (s *sessions) lookup(ctx context.Context, sessionToken string) (*session, error) {
	if sessionToken == "" || len(sessionToken) > 100 {
		return nil, errNoSession
	}
	sess := &session{csrf: csrfToken(sessionToken)}
	var access string
	err := s.pool.QueryRow(ctx, `SELECT owner_id, access, allowed_origins, expires_at FROM portal_sessions
 WHERE session_hash = $1 AND expires_at > $2`, hashToken(sessionToken), s.now()).
		Scan(&sess.ownerID, &access, &sess.origins, &sess.expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("read portal session: %w", err)
	}
	sess.access = Access(access)
	return sess, nil
}

// end deletes a session (sign out).
func (s *sessions) end(ctx context.Context, sessionToken string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM portal_sessions WHERE session_hash = $1`, hashToken(sessionToken))
	return err
}
