package portal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	FieldDisplayName    = "display_name"
	FieldReturnURL      = "return_url"
	FieldBranding       = "branding"
)

// Bounds of what a session carries.
const (
	MaxDisplayNameLen = 100
	MaxReturnURLLen   = 2048
	// sessionKeep is how long a session's row outlives its expiry: the
	// page a spent link or an ended session leads to still finds the way
	// back (return_url) and the frame it may show in.
	sessionKeep = 24 * time.Hour
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
	// DisplayName is the owner as people know it ("Acme Corp"), shown on
	// every page; "" shows the owner id.
	DisplayName string
	// ReturnURL is the way back to the application: an absolute http(s)
	// URL, offered on every page and on the pages where a session ends.
	ReturnURL string
	// Confirm makes a link for email or chat: opening it shows a page of
	// the portal whose one button (a POST) spends it, so that a link
	// previewer's GET cannot.
	Confirm bool
	// Branding overrides the deployment's for this session.
	Branding Branding
	// MintedBy says who made the session when it was not the application:
	// "operator" for the console's read-only view of an owner.
	MintedBy string
}

// Link is a one-time link into the portal.
type Link struct {
	URL       string
	ExpiresAt time.Time
}

// session is an opened link: what every page request is checked against.
type session struct {
	id          int64
	ownerID     string
	access      Access
	origins     []string
	expires     time.Time
	displayName string
	returnURL   string
	branding    Branding
	mintedBy    string
	// csrf is the form token of this session: derived from the cookie's
	// token, so it needs no storage and a page can only know it by having
	// been served to the session's browser.
	csrf string
}

func (s *session) canManage() bool { return s.access == AccessManage }

// who is the owner as the pages name it.
func (s *session) who() string {
	if s.displayName != "" {
		return s.displayName
	}
	return s.ownerID
}

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
	r.DisplayName = strings.TrimSpace(r.DisplayName)
	if len(r.DisplayName) > MaxDisplayNameLen {
		add(FieldDisplayName, "must be at most "+strconv.Itoa(MaxDisplayNameLen)+" bytes")
	} else if !printable(r.DisplayName) {
		add(FieldDisplayName, "must be printable text (no control characters)")
	}
	if r.ReturnURL != "" {
		if desc := returnURLProblem(r.ReturnURL); desc != "" {
			add(FieldReturnURL, desc)
		}
	}
	for _, v := range r.Branding.validate() {
		add(FieldBranding+"."+v.Field, v.Description)
	}
	if len(ve.Violations) > 0 {
		return &ve
	}
	return nil
}

// printable: valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// ValidateReturnURL checks a deployment's return URL as a session's is.
func ValidateReturnURL(raw string) error {
	if desc := returnURLProblem(raw); desc != "" {
		return errors.New(desc)
	}
	return nil
}

// returnURLProblem says what is wrong with a return URL, or "". It is put
// in an href as it is: only an absolute http(s) URL without credentials.
func returnURLProblem(raw string) string {
	if len(raw) > MaxReturnURLLen {
		return "must be at most " + strconv.Itoa(MaxReturnURLLen) + " bytes"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return "must be an absolute http(s) URL, like https://app.example.com/settings/webhooks"
	}
	if u.User != nil {
		return "must not carry a user name or password"
	}
	if !printable(raw) || strings.ContainsAny(raw, " \t") {
		return "must be a URL without spaces or control characters"
	}
	return ""
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
	if strings.Contains(u.Host, "*") {
		// frame-ancestors would take https://*.example.com, or https://*
		// (any site): a link must name the sites that may frame it.
		return "must name one origin: wildcards are refused"
	}
	if strings.ContainsAny(o, " ;,'\"\\\t\r\n") || o != u.Scheme+"://"+u.Host {
		return "must be an origin in plain form, like https://app.example.com"
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		// Anyone on the network path of a plain-HTTP page can frame the
		// portal in it.
		return "must be https:// (plain http:// only for localhost or a loopback address)"
	}
	return ""
}

// loopbackHost reports whether host is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// create stores a new link and returns its token. Sessions expired a day
// ago are deleted on the way: creating sessions is rare, and the index
// makes the delete cheap.
func (s *sessions) create(ctx context.Context, r SessionRequest) (string, time.Time, error) {
	tok := newToken()
	expires := s.now().Add(r.TTL)
	origins := r.AllowedOrigins
	if origins == nil {
		origins = []string{}
	}
	brand, err := json.Marshal(r.Branding)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("store portal session: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM portal_sessions WHERE expires_at < $1`, s.now().Add(-sessionKeep)); err != nil {
		return "", time.Time{}, fmt.Errorf("prune portal sessions: %w", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO portal_sessions (link_hash, owner_id, access, allowed_origins, expires_at, created_at,
    display_name, return_url, confirm, branding, minted_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, hashToken(tok), r.OwnerID, string(r.Access), origins, expires, s.now(),
		r.DisplayName, r.ReturnURL, r.Confirm, brand, r.MintedBy)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("store portal session: %w", err)
	}
	return tok, expires, nil
}

// errNoSession: the link or cookie names no live session (spent, expired,
// or never issued: the pages do not say which).
var errNoSession = errors.New("no such session")

const sessionColumns = `id, owner_id, access, allowed_origins, expires_at, display_name, return_url, branding, minted_by`

func scanSession(row pgx.Row, sess *session, extra ...any) error {
	var access string
	var brand []byte
	dest := append([]any{&sess.id, &sess.ownerID, &access, &sess.origins, &sess.expires, &sess.displayName, &sess.returnURL, &brand, &sess.mintedBy}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	sess.access = Access(access)
	if len(brand) > 0 {
		_ = json.Unmarshal(brand, &sess.branding) // written by create, from a Branding
	}
	return nil
}

// link is an unspent link as its page needs it, without spending it.
type link struct {
	session
	confirm bool
}

// peek reads a link without spending it: whether it is live, whether it
// asks for a click first, and its owner (for the page that asks before
// replacing another owner's session). A spent or expired link is
// errNoSession, with what the page needs to offer the way back (dead).
func (s *sessions) peek(ctx context.Context, linkToken string) (*link, *session, error) {
	if linkToken == "" || len(linkToken) > 100 {
		return nil, nil, errNoSession
	}
	l := &link{}
	var opened bool
	err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+`, confirm, opened_at IS NOT NULL OR expires_at <= $2 FROM portal_sessions WHERE link_hash = $1`,
		hashToken(linkToken), s.now()), &l.session, &l.confirm, &opened)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, errNoSession
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read portal link: %w", err)
	}
	if opened {
		return nil, &l.session, errNoSession
	}
	return l, nil, nil
}

// open spends a link and starts its session, returning the cookie's token.
// One statement, so two browsers opening one link cannot both win.
func (s *sessions) open(ctx context.Context, linkToken string) (string, *session, error) {
	if linkToken == "" || len(linkToken) > 100 {
		return "", nil, errNoSession
	}
	tok := newToken()
	sess := &session{csrf: csrfToken(tok)}
	err := scanSession(s.pool.QueryRow(ctx, `UPDATE portal_sessions SET opened_at = $3, session_hash = $2
 WHERE link_hash = $1 AND opened_at IS NULL AND expires_at > $3
RETURNING `+sessionColumns, hashToken(linkToken), hashToken(tok), s.now()), sess)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, errNoSession
	}
	if err != nil {
		return "", nil, fmt.Errorf("open portal session: %w", err)
	}
	return tok, sess, nil
}

// lookup returns the live session of a cookie's token. A session that has
// ended (expired, signed out) is errNoSession with the session as it was,
// for the page that offers the way back.
func (s *sessions) lookup(ctx context.Context, sessionToken string) (*session, error) {
	if sessionToken == "" || len(sessionToken) > 100 {
		return nil, errNoSession
	}
	sess := &session{csrf: csrfToken(sessionToken)}
	var ended bool
	err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+`, expires_at <= $2 OR ended_at IS NOT NULL FROM portal_sessions
 WHERE session_hash = $1`, hashToken(sessionToken), s.now()), sess, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("read portal session: %w", err)
	}
	if ended {
		return sess, errNoSession
	}
	return sess, nil
}

// end ends a session (sign out); the row stays until it would have
// expired a day ago, for the way back.
func (s *sessions) end(ctx context.Context, sessionToken string) error {
	_, err := s.pool.Exec(ctx, `UPDATE portal_sessions SET ended_at = $2 WHERE session_hash = $1 AND ended_at IS NULL`, hashToken(sessionToken), s.now())
	return err
}
