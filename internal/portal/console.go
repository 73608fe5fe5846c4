package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// consoleData is the operator console: every owner's endpoints in trouble
// and the delivery queue, read-only, with links into River UI; a search
// across owners; and one owner's drill-down.
//
// Its sections are built by consoleData (the overview), consoleSearch and
// consoleOwner, each a plain query over the tables, and shown by blocks of
// templates/console.html: a new section adds one of each.
type consoleData struct {
	RiverUI  string
	Failing  []consoleEndpoint
	Disabled []consoleEndpoint
	Queue    []queueRow
	Oldest   *oldestJob
	Owners   []ownerFailures
	// Backlogs are the owners with the most deliveries waiting to be
	// fetched, the largest first (metrics.OwnerBacklogs).
	Backlogs  []ownerBacklog
	Generated time.Time
	// Query is the search as typed, Results what it found (nil: no
	// search).
	Query   string
	Results []consoleEndpoint
	// Owner is the owner drilled into ("" on the overview), with its view.
	Owner     string
	OwnerView *ownerView
}

// consoleEndpoint is an endpoint on a console page. URL is only the
// receiver's origin (scheme://host[:port]): the path and query may carry
// the owner's credentials, which an operator has no need to see.
type consoleEndpoint struct {
	ID, Owner, URL, Reason string
	Name                   string
	Since                  time.Time
	ProbeAt                *time.Time
	Health                 health
	LastError              string
}

type queueRow struct {
	State string
	Count int64
}

type oldestJob struct {
	ID        int64
	State     string
	CreatedAt time.Time
	Waiting   string
}

// ownerBacklog is an owner's deliveries waiting to be fetched and how long
// the oldest has waited.
type ownerBacklog struct {
	Owner      string
	Deliveries int64
	Oldest     string
}

type ownerFailures struct {
	Owner              string
	Failures, Attempts int64
	Endpoints          int64
}

// ownerView is one owner's endpoints and recent deliveries, read-only.
type ownerView struct {
	Endpoints  []consoleEndpoint
	Deliveries []consoleDelivery
	More       bool // more endpoints than shown
}

type consoleDelivery struct {
	*endpoint.Delivery
	Endpoint string // its endpoint's origin
}

func (d *consoleData) pageTitle() string {
	if d.Owner != "" {
		return "Owner " + d.Owner
	}
	return "Operator console"
}

// consoleLimit bounds each list of the console.
const consoleLimit = 50

// originOf is a URL's scheme://host[:port], or "" when it has none.
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// Console serves the operator console at prefix (say "/riverui/console/"),
// with its own copy of the assets. Mount it behind the operator role
// (auth.Pages, River UI's login); riverUI is River UI's path prefix, for
// links (and its logout). It reads across owners, so it never goes on the
// owners' portal.
func (p *Portal) Console(prefix, riverUI string) http.Handler {
	riverUI = strings.TrimSuffix(riverUI, "/")
	static := http.StripPrefix(prefix+"static/", staticHandler())
	mux := http.NewServeMux()
	mux.Handle("GET "+prefix+"static/", static)
	mux.HandleFunc("GET "+prefix+"theme/{file}", serveTheme)
	mux.HandleFunc("GET "+prefix+"brand/logo", p.serveLogo)
	mux.HandleFunc("GET "+prefix+"brand/icon", p.serveIcon)
	page := func(build func(r *http.Request, d *consoleData) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			securityHeaders(w, nil)
			d := &consoleData{Generated: p.cfg.Now(), RiverUI: riverUI}
			if err := build(r, d); err != nil {
				if errors.Is(err, endpoint.ErrInvalid) {
					p.plain(w, http.StatusNotFound, "Not found: "+err.Error())
					return
				}
				p.logger.ErrorContext(r.Context(), "portal: operator console", slog.Any("error", err))
				p.plain(w, http.StatusInternalServerError, "The console could not read the database. Try again.")
				return
			}
			v := p.newView(nil, d)
			v.Base, v.Static, v.Nav = prefix, prefix+"static/", "console"
			p.renderView(w, r, "console", v)
		}
	}
	mux.HandleFunc("GET "+prefix+"{$}", page(func(r *http.Request, d *consoleData) error {
		if q := strings.TrimSpace(r.URL.Query().Get("q")); q != "" {
			d.Query = q
			return p.consoleSearch(r.Context(), d)
		}
		return p.consoleData(r.Context(), d)
	}))
	mux.HandleFunc("GET "+prefix+"owners/{owner}", page(func(r *http.Request, d *consoleData) error {
		d.Owner = r.PathValue("owner")
		return p.consoleOwner(r.Context(), d)
	}))
	mux.HandleFunc("GET "+prefix+"owners/{owner}/open", p.consoleOpen)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w, nil)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			p.plain(w, http.StatusMethodNotAllowed, "The console only reads.")
			return
		}
		p.plain(w, http.StatusNotFound, "Not found.")
	})
	return mux
}

// consoleOpen opens an owner's portal read-only for the operator: a
// session minted on the spot, logged, and opened at once. It is a GET (the
// operator pages take only JSON posts) that only a click on a console page
// may make: Fetch Metadata must say same-origin and a user's navigation,
// and a prefetch is refused.
func (p *Portal) consoleOpen(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w, nil)
	if r.Header.Get("Sec-Fetch-Site") != "same-origin" || isPrefetch(r) {
		p.plain(w, http.StatusForbidden, "Refused: open an owner's portal with the button on the console's owner page.")
		return
	}
	owner := r.PathValue("owner")
	link, err := p.CreateSession(r.Context(), SessionRequest{OwnerID: owner, Access: AccessRead, TTL: time.Hour,
		DisplayName: owner + " (operator view)", MintedBy: "operator"})
	if err != nil {
		if _, ok := errors.AsType[*endpoint.ValidationError](err); ok {
			p.plain(w, http.StatusNotFound, "Not found: "+err.Error())
			return
		}
		p.logger.ErrorContext(r.Context(), "portal: operator view", slog.Any("error", err))
		p.plain(w, http.StatusInternalServerError, "The session could not be made. Try again.")
		return
	}
	p.logger.WarnContext(r.Context(), "portal: operator opened an owner's portal, read-only",
		slog.String("owner_id", owner), slog.String("remote_addr", r.RemoteAddr), slog.Time("expires_at", link.ExpiresAt))
	http.Redirect(w, r, link.URL, http.StatusSeeOther)
}

// consoleSearch finds endpoints across owners by owner id, endpoint id or
// URL host.
func (p *Portal) consoleSearch(ctx context.Context, d *consoleData) error {
	q := d.Query
	var rows pgx.Rows
	var err error
	if id, perr := uuid.Parse(q); perr == nil {
		rows, err = p.sessions.pool.Query(ctx, `SELECT id::text, owner_id, url, name, enabled, coalesce(disabled_reason, ''), failing_since, probe_at
  FROM webhook_endpoints WHERE id = $1`, id)
	} else {
		// The host part of the URL: after "://", up to the first "/", "?"
		// or "#"; an owner id matches whole or as a prefix.
		rows, err = p.sessions.pool.Query(ctx, `SELECT id::text, owner_id, url, name, enabled, coalesce(disabled_reason, ''), failing_since, probe_at
  FROM webhook_endpoints
 WHERE owner_id = $1 OR starts_with(owner_id, $1)
    OR strpos(lower(substring(url from '^[a-z]+://([^/?#]*)')), lower($1)) > 0
 ORDER BY owner_id, created_at LIMIT $2`, q, consoleLimit)
	}
	if err != nil {
		return fmt.Errorf("search endpoints: %w", err)
	}
	defer rows.Close()
	d.Results = []consoleEndpoint{}
	for rows.Next() {
		var (
			e       consoleEndpoint
			enabled bool
			failing *time.Time
		)
		if err := rows.Scan(&e.ID, &e.Owner, &e.URL, &e.Name, &enabled, &e.Reason, &failing, &e.ProbeAt); err != nil {
			return fmt.Errorf("search endpoints: %w", err)
		}
		e.URL = originOf(e.URL)
		e.Health = healthOf(&endpoint.Endpoint{Enabled: enabled, DisabledReason: e.Reason, FailingSince: failing, NextProbeAt: e.ProbeAt}, d.Generated)
		d.Results = append(d.Results, e)
	}
	return rows.Err()
}

// consoleOwner is one owner's drill-down, through the endpoint service as
// the owner's own pages read it: its endpoints with why they fail, and its
// latest deliveries.
func (p *Portal) consoleOwner(ctx context.Context, d *consoleData) error {
	page, err := p.svc.List(ctx, d.Owner, consoleLimit, "", nil)
	if err != nil {
		return err
	}
	ov := &ownerView{More: page.NextPageToken != ""}
	d.OwnerView = ov
	ov.Endpoints = make([]consoleEndpoint, len(page.Items))
	recent := make([][]*endpoint.Delivery, len(page.Items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lastDeliveryReads)
	for i, e := range page.Items {
		ov.Endpoints[i] = consoleEndpoint{ID: e.ID.String(), Owner: e.OwnerID, URL: originOf(e.URL), Name: e.Name,
			Reason: e.DisabledReason, Health: healthOf(e, d.Generated)}
		g.Go(func() error {
			ds, err := p.svc.ListDeliveries(gctx, endpoint.ListDeliveriesRequest{OwnerID: d.Owner, EndpointID: e.ID.String(), PageSize: 5})
			if err != nil {
				return err
			}
			recent[i] = ds.Items
			if len(ds.Items) > 0 {
				ov.Endpoints[i].LastError = ds.Items[0].LastError
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, ds := range recent {
		for _, dl := range ds {
			ov.Deliveries = append(ov.Deliveries, consoleDelivery{Delivery: dl, Endpoint: ov.Endpoints[i].URL})
		}
	}
	slices.SortFunc(ov.Deliveries, func(a, b consoleDelivery) int { return b.CreatedAt.Compare(a.CreatedAt) })
	if len(ov.Deliveries) > 20 {
		ov.Deliveries = ov.Deliveries[:20]
	}
	return nil
}

func (p *Portal) consoleData(ctx context.Context, d *consoleData) error {
	pool := p.sessions.pool
	rows, err := pool.Query(ctx, `SELECT id::text, owner_id, url, failing_since, probe_at FROM webhook_endpoints
 WHERE enabled AND failing_since IS NOT NULL ORDER BY failing_since LIMIT $1`, consoleLimit)
	if err != nil {
		return fmt.Errorf("failing endpoints: %w", err)
	}
	for rows.Next() {
		var e consoleEndpoint
		if err := rows.Scan(&e.ID, &e.Owner, &e.URL, &e.Since, &e.ProbeAt); err != nil {
			rows.Close()
			return fmt.Errorf("failing endpoints: %w", err)
		}
		e.URL = originOf(e.URL)
		d.Failing = append(d.Failing, e)
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT id::text, owner_id, url, updated_at, coalesce(disabled_reason, '') FROM webhook_endpoints
 WHERE NOT enabled ORDER BY updated_at DESC LIMIT $1`, consoleLimit)
	if err != nil {
		return fmt.Errorf("disabled endpoints: %w", err)
	}
	for rows.Next() {
		var e consoleEndpoint
		if err := rows.Scan(&e.ID, &e.Owner, &e.URL, &e.Since, &e.Reason); err != nil {
			rows.Close()
			return fmt.Errorf("disabled endpoints: %w", err)
		}
		e.URL = originOf(e.URL)
		d.Disabled = append(d.Disabled, e)
	}
	rows.Close()
	// The states as the metrics count them (every one but completed),
	// through River's state index.
	rows, err = pool.Query(ctx, `SELECT state::text, count(*) FROM river_job WHERE state IN ('`+
		strings.Join(metrics.QueueStates(), "', '")+`') AND kind = $1 GROUP BY 1 ORDER BY 1`, job.KindDeliver)
	if err != nil {
		return fmt.Errorf("queue depth: %w", err)
	}
	for rows.Next() {
		var q queueRow
		if err := rows.Scan(&q.State, &q.Count); err != nil {
			rows.Close()
			return fmt.Errorf("queue depth: %w", err)
		}
		d.Queue = append(d.Queue, q)
	}
	rows.Close()
	var o oldestJob
	err = pool.QueryRow(ctx, `SELECT id, state::text, created_at FROM river_job
 WHERE state IN ('available', 'scheduled', 'retryable', 'pending') AND kind = $1 ORDER BY created_at LIMIT 1`, job.KindDeliver).Scan(&o.ID, &o.State, &o.CreatedAt)
	if err == nil {
		o.Waiting = d.Generated.Sub(o.CreatedAt).Round(time.Second).String()
		d.Oldest = &o
	}
	backlogs, err := metrics.OwnerBacklogs(ctx, pool)
	if err != nil {
		return err
	}
	for _, b := range backlogs[:min(len(backlogs), metrics.TopOwners)] {
		d.Backlogs = append(d.Backlogs, ownerBacklog{Owner: b.Owner, Deliveries: b.Deliveries,
			Oldest: (time.Duration(b.OldestSeconds * float64(time.Second))).Round(time.Second).String()})
	}
	rows, err = pool.Query(ctx, `SELECT e.owner_id, sum(s.attempts - s.successes)::bigint, sum(s.attempts)::bigint, count(DISTINCT e.id)
  FROM endpoint_stats s JOIN webhook_endpoints e ON e.id = s.endpoint_id
 WHERE s.span = 3600 AND s.bucket >= date_trunc('hour', now()) - interval '23 hours'
 GROUP BY e.owner_id HAVING sum(s.attempts - s.successes) > 0 ORDER BY 2 DESC LIMIT 10`)
	if err != nil {
		return fmt.Errorf("owners with failures: %w", err)
	}
	for rows.Next() {
		var f ownerFailures
		if err := rows.Scan(&f.Owner, &f.Failures, &f.Attempts, &f.Endpoints); err != nil {
			rows.Close()
			return fmt.Errorf("owners with failures: %w", err)
		}
		d.Owners = append(d.Owners, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("owners with failures: %w", err)
	}
	return p.consoleReasons(ctx, d.Failing)
}

// consoleReasons reads why each failing endpoint fails: its latest
// delivery's last error.
func (p *Portal) consoleReasons(ctx context.Context, es []consoleEndpoint) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lastDeliveryReads)
	for i := range es {
		g.Go(func() error {
			ds, err := p.svc.ListDeliveries(gctx, endpoint.ListDeliveriesRequest{OwnerID: es[i].Owner, EndpointID: es[i].ID, PageSize: 1})
			if err != nil {
				return fmt.Errorf("failing endpoint's last error: %w", err)
			}
			if len(ds.Items) > 0 {
				es[i].LastError = ds.Items[0].LastError
			}
			return nil
		})
	}
	return g.Wait()
}
