package main

import (
	"net"
	"net/netip"
	"strings"
)

// plaintextCredential is a credential the configuration sends in plaintext
// to an address off this host.
type plaintextCredential struct {
	// what names the credential and how to protect it, for the log line.
	what, fix string
	// addr is where it goes.
	addr string
}

// plaintextCredentials lists the credentials cfg would send unencrypted to
// an address that is not loopback: the access service token without
// -access-tls, and the egress proxy's credentials (the proxy is always
// spoken to in plain HTTP). On loopback (a sidecar) plaintext is fine; off
// it, anyone on the path reads them. serve logs each at start-up as a
// warning: a deployment may have reasons (a service mesh that encrypts
// beneath), so it is not refused.
func plaintextCredentials(cfg *serveConfig) []plaintextCredential {
	var out []plaintextCredential
	if cfg.AccessAddr != "" && cfg.AccessToken != "" && !cfg.AccessTLS && !loopbackTarget(cfg.AccessAddr) {
		out = append(out, plaintextCredential{
			what: "access service token (DISPATCHER_ACCESS_TOKEN)", addr: cfg.AccessAddr,
			fix: "set -access-tls (DISPATCHER_ACCESS_TLS), or reach the access service over loopback",
		})
	}
	if p := cfg.EgressProxy; p != nil && p.Username != "" && !loopbackTarget(p.Addr) {
		out = append(out, plaintextCredential{
			what: "egress proxy credentials (-egress-proxy-credentials-file)", addr: p.Addr,
			fix: "run the proxy on loopback (a sidecar), or on a network path that is encrypted beneath",
		})
	}
	return out
}

// loopbackTarget reports whether a host:port (or a gRPC target such as
// dns:///host:port, passthrough:///host:port) names this host: localhost or
// a loopback address. Any other name counts as off the host: what it
// resolves to may change.
func loopbackTarget(target string) bool {
	if i := strings.Index(target, ":///"); i >= 0 {
		target = target[i+len(":///"):]
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}
