package portal

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
)

// chart is an endpoint's attempts per hour, drawn as stacked bars in SVG on
// the server (html/template escapes every value; nothing runs in the
// browser), with its latency percentiles per window.
type chart struct {
	Hours  int
	Width  int
	Height int
	Bars   []bar
	Max    int64
	Ticks  []tick
	Ok     int64
	Failed int64
}

type bar struct {
	X, W           float64
	OkY, OkH       float64
	FailY, FailH   float64
	Title          string
	Label          string // an hour label under every sixth bar
	LabelX, LabelY float64
}

type tick struct {
	Y     float64
	Label string
}

const (
	chartW      = 720
	chartH      = 180
	chartTop    = 10
	chartBottom = 24
	chartLeft   = 36
)

// chartFor reads the hours of the window the page asks for (?window=7d,
// else 24 h); nil when they cannot be read (the rest of the page stands).
func (p *Portal) chartFor(r *http.Request, sess *session, e *endpoint.Endpoint) *chart {
	n := 24
	if r.URL.Query().Get("window") == "7d" {
		n = 7 * 24
	}
	hours, err := p.svc.EndpointHourly(r.Context(), sess.ownerID, e.ID.String(), n)
	if err != nil {
		p.logger.WarnContext(r.Context(), "portal: hourly stats", slog.Any("error", err))
		return nil
	}
	return drawChart(hours)
}

func drawChart(hours []attempt.Hour) *chart {
	c := &chart{Hours: len(hours), Width: chartW, Height: chartH}
	for _, h := range hours {
		c.Max = max(c.Max, h.Attempts)
		c.Ok += h.Successes
		c.Failed += h.Failures()
	}
	top := niceMax(c.Max)
	plotH := float64(chartH - chartTop - chartBottom)
	slot := float64(chartW-chartLeft) / float64(len(hours))
	every := max(1, len(hours)/6)
	for i, h := range hours {
		okH := plotH * float64(h.Successes) / float64(top)
		failH := plotH * float64(h.Failures()) / float64(top)
		x := chartLeft + float64(i)*slot
		b := bar{
			X: x + slot*0.1, W: slot * 0.8,
			OkH: okH, OkY: chartTop + plotH - okH,
			FailH: failH, FailY: chartTop + plotH - okH - failH,
			Title: h.Start.UTC().Format("Jan 2 15:04") + " UTC: " + strconv.FormatInt(h.Successes, 10) + " delivered, " +
				strconv.FormatInt(h.Failures(), 10) + " failed",
		}
		if i%every == 0 {
			layout := "15:04"
			if len(hours) > 48 {
				layout = "Jan 2"
			}
			b.Label, b.LabelX, b.LabelY = h.Start.UTC().Format(layout), x, chartH-6
		}
		c.Bars = append(c.Bars, b)
	}
	for _, f := range []float64{0, 0.5, 1} {
		c.Ticks = append(c.Ticks, tick{Y: chartTop + plotH - plotH*f, Label: strconv.FormatInt(int64(float64(top)*f), 10)})
	}
	return c
}

// niceMax is the chart's top: at least 2, rounded up to 1, 2 or 5 times a
// power of ten.
func niceMax(v int64) int64 {
	if v < 2 {
		return 2
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// Rate is the share of attempts that succeeded, for a page.
func (s stats24h) Rate() string {
	if s.Attempts == 0 {
		return "—"
	}
	pct := 100 * float64(s.Attempts-s.Failures) / float64(s.Attempts)
	if pct == float64(int64(pct)) {
		return strconv.FormatInt(int64(pct), 10) + "%"
	}
	return strconv.FormatFloat(pct, 'f', 1, 64) + "%"
}
