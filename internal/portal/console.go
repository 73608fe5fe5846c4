package portal

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// consoleData is the operator console: every owner's endpoints in trouble
// and the delivery queue, read-only, with links into River UI.
type consoleData struct {
	RiverUI   string
	Failing   []consoleEndpoint
	Disabled  []consoleEndpoint
	Queue     []queueRow
	Oldest    *oldestJob
	Owners    []ownerFailures
	Generated time.Time
}

type consoleEndpoint struct {
	ID, Owner, URL, Reason string
	Since                  time.Time
	ProbeAt                *time.Time
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

type ownerFailures struct {
	Owner              string
	Failures, Attempts int64
	Endpoints          int64
}

func (*consoleData) pageTitle() string { return "Operator console" }

// consoleLimit bounds each list of the console.
const consoleLimit = 50

// Console serves the operator console at prefix (say "/riverui/console/"),
// with its own copy of the assets. Mount it behind the operator role
// (auth.Pages, River UI's login); riverUI is River UI's path prefix, for
// links. It reads across owners, so it never goes on the owners' portal.
func (p *Portal) Console(prefix, riverUI string) http.Handler {
	riverUI = strings.TrimSuffix(riverUI, "/")
	static := http.StripPrefix(prefix+"static/", staticHandler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, prefix+"static/") {
			static.ServeHTTP(w, r)
			return
		}
		securityHeaders(w, nil)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			p.plain(w, http.StatusMethodNotAllowed, "The console only reads.")
			return
		}
		data, err := p.consoleData(r.Context())
		if err != nil {
			p.logger.ErrorContext(r.Context(), "portal: operator console", slog.Any("error", err))
			p.plain(w, http.StatusInternalServerError, "The console could not read the database. Try again.")
			return
		}
		data.RiverUI = riverUI
		if r.URL.Path != prefix {
			p.plain(w, http.StatusNotFound, "Not found.")
			return
		}
		// The layout's links go to the console's own assets.
		v := view{Base: prefix, Data: data, Title: "Operator console", Nav: "console"}
		p.renderView(w, r, "console", &v)
	})
}

func (p *Portal) consoleData(ctx context.Context) (*consoleData, error) {
	pool := p.sessions.pool
	d := &consoleData{Generated: p.cfg.Now()}
	rows, err := pool.Query(ctx, `SELECT id::text, owner_id, url, failing_since, probe_at FROM webhook_endpoints
 WHERE enabled AND failing_since IS NOT NULL ORDER BY failing_since LIMIT $1`, consoleLimit)
	if err != nil {
		return nil, fmt.Errorf("failing endpoints: %w", err)
	}
	for rows.Next() {
		var e consoleEndpoint
		if err := rows.Scan(&e.ID, &e.Owner, &e.URL, &e.Since, &e.ProbeAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("failing endpoints: %w", err)
		}
		d.Failing = append(d.Failing, e)
	}
	rows.Close()
	rows, err = pool.Query(ctx, `SELECT id::text, owner_id, url, updated_at, coalesce(disabled_reason, '') FROM webhook_endpoints
 WHERE NOT enabled ORDER BY updated_at DESC LIMIT $1`, consoleLimit)
	if err != nil {
		return nil, fmt.Errorf("disabled endpoints: %w", err)
	}
	for rows.Next() {
		var e consoleEndpoint
		if err := rows.Scan(&e.ID, &e.Owner, &e.URL, &e.Since, &e.Reason); err != nil {
			rows.Close()
			return nil, fmt.Errorf("disabled endpoints: %w", err)
		}
		d.Disabled = append(d.Disabled, e)
	}
	rows.Close()
	// The states as the metrics count them (every one but completed),
	// through River's state index.
	rows, err = pool.Query(ctx, `SELECT state::text, count(*) FROM river_job WHERE state IN ('`+
		strings.Join(metrics.QueueStates(), "', '")+`') AND kind = $1 GROUP BY 1 ORDER BY 1`, job.KindDeliver)
	if err != nil {
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	for rows.Next() {
		var q queueRow
		if err := rows.Scan(&q.State, &q.Count); err != nil {
			rows.Close()
			return nil, fmt.Errorf("queue depth: %w", err)
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
	rows, err = pool.Query(ctx, `SELECT e.owner_id, sum(s.attempts - s.successes)::bigint, sum(s.attempts)::bigint, count(DISTINCT e.id)
  FROM endpoint_stats s JOIN webhook_endpoints e ON e.id = s.endpoint_id
 WHERE s.span = 3600 AND s.bucket >= date_trunc('hour', now()) - interval '23 hours'
 GROUP BY e.owner_id HAVING sum(s.attempts - s.successes) > 0 ORDER BY 2 DESC LIMIT 10`)
	if err != nil {
		return nil, fmt.Errorf("owners with failures: %w", err)
	}
	for rows.Next() {
		var f ownerFailures
		if err := rows.Scan(&f.Owner, &f.Failures, &f.Attempts, &f.Endpoints); err != nil {
			rows.Close()
			return nil, fmt.Errorf("owners with failures: %w", err)
		}
		d.Owners = append(d.Owners, f)
	}
	rows.Close()
	return d, rows.Err()
}
