package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The ingest path's histograms (dispatcher_ingest_*), which say where a
// Publish call's time goes in the store: its wait for a group transaction
// (the gRPC path's), the transaction, the calls per group. A binary that
// does not export them (older ones) gets no note.
var ingestHistograms = []struct{ name, what, unit string }{
	{"dispatcher_ingest_wait_seconds", "wait for a group transaction (grpc)", "ms"},
	{"dispatcher_ingest_transaction_seconds", "group transaction", "ms"},
	{"dispatcher_ingest_group_calls", "calls per group", ""},
}

// ingestHistogram returns the key under which scrape keeps one series of
// the ingest histograms: name/le for a bucket, name/sum, name/count.
func ingestHistogram(name, labels string) (string, bool) {
	for _, h := range ingestHistograms {
		rest, ok := strings.CutPrefix(name, h.name)
		if !ok {
			continue
		}
		if strings.Contains(labels, `path="`) && !strings.Contains(labels, `path="grpc"`) {
			return "", false
		}
		switch rest {
		case "_bucket":
			for _, kv := range labelRE.FindAllStringSubmatch(labels, -1) {
				if kv[1] == "le" {
					return h.name + "/le/" + kv[2], true
				}
			}
		case "_sum", "_count":
			return h.name + "/" + rest[1:], true
		}
	}
	return "", false
}

// ingestNote summarises the ingest histograms' growth during the run
// (delta: key → increase, as ingestHistogram keys them): mean, and p50 and
// p99 interpolated within buckets as Prometheus's histogram_quantile does.
func ingestNote(delta map[string]float64) string {
	var parts []string
	for _, h := range ingestHistograms {
		n := delta[h.name+"/count"]
		if n <= 0 {
			continue
		}
		type bucket struct{ le, n float64 }
		var bs []bucket
		for k, v := range delta {
			le, ok := strings.CutPrefix(k, h.name+"/le/")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			bs = append(bs, bucket{f, v})
		}
		slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
		q := func(p float64) float64 {
			rank, lower, below := p*n, 0.0, 0.0
			for _, b := range bs {
				if b.n >= rank {
					if math.IsInf(b.le, 1) {
						return lower
					}
					if b.n == below {
						return b.le
					}
					return lower + (b.le-lower)*(rank-below)/(b.n-below)
				}
				lower, below = b.le, b.n
			}
			return lower
		}
		scale := 1.0
		if h.unit == "ms" {
			scale = 1000
		}
		parts = append(parts, fmt.Sprintf("%s mean %.1f%s p50 ~%.1f p99 ~%.1f (%d)",
			h.what, delta[h.name+"/sum"]/n*scale, h.unit, q(0.5)*scale, q(0.99)*scale, int64(n)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "dispatcher's ingest metrics: " + strings.Join(parts, "; ")
}
