package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

type doc struct {
	file string
	obj  map[string]any
}

func (d doc) kind() string { s, _ := d.obj["kind"].(string); return s }
func (d doc) name() string { return str(d.obj, "metadata", "name") }
func (d doc) id() string   { return fmt.Sprintf("%s %s/%s", filepath.Base(d.file), d.kind(), d.name()) }

// decodeYAMLDocs splits a multi-document YAML file. yaml.v3 rejects
// duplicate keys, which kubectl would silently resolve to the last one.
func decodeYAMLDocs(file string, content []byte) ([]doc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(content))
	var out []doc
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if m != nil {
			out = append(out, doc{file: file, obj: m})
		}
	}
}

func yamlMarshal(v any) ([]byte, error) { return yaml.Marshal(v) }

// Accessors over decoded YAML: missing or mistyped values are zero.

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }
func list(v any, path ...string) []any { l, _ := get(v, path...).([]any); return l }
func dict(v any, path ...string) map[string]any {
	m, _ := get(v, path...).(map[string]any)
	return m
}

func num(v any, path ...string) (int, bool) {
	switch n := get(v, path...).(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	}
	return 0, false
}

func stringMap(v any) map[string]string {
	out := map[string]string{}
	for k, x := range dict(v) {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// matches reports whether a matchLabels selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// knownEnv are environment variables read by the Go runtime, not config.go.
var knownEnv = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GODEBUG": true, "GOGC": true, "TZ": true}

// serveShutdownOverhead is what serve's shutdown adds to
// DISPATCHER_SHUTDOWN_TIMEOUT at worst (cmd/dispatcher/serve.go shutdown():
// gRPC graceful stop 5 s + StopAndCancel 10 s + ops server 2 s).
const serveShutdownOverhead = 17 * time.Second

// requiredExcepts are the ranges the receivers' egress rule must exclude.
var requiredExcepts = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"}

// checkManifests runs the cross-object checks on every rendered set of
// manifests (each `helm template` value set, each `kustomize build` overlay).
func checkManifests(l layout, cat *catalogue, p *problems) {
	if len(l.rendered) == 0 {
		p.add(l.deploy, "no rendered manifests to check (-rendered name=file): the chart and overlays went unchecked")
		return
	}
	configSource := readConfigSource(l.repo)
	for _, name := range slices.Sorted(maps.Keys(l.rendered)) {
		path := l.rendered[name]
		content, err := os.ReadFile(path)
		if err != nil {
			p.addErr(path, err)
			continue
		}
		docs, err := decodeYAMLDocs(path, content)
		if err != nil {
			p.addErr(path, err)
			continue
		}
		for i := range docs {
			docs[i].file = name
		}
		checkObjects(name, docs, configSource, cat, p)
	}
}

// checkObjects checks one rendered set of manifests.
func checkObjects(set string, docs []doc, configSource string, cat *catalogue, p *problems) {
	for _, d := range docs {
		if d.obj["metadata"] != nil && str(d.obj, "metadata", "namespace") != "" {
			p.add(d.file, "%s: sets metadata.namespace; the manifests are namespace-agnostic", d.id())
		}
		if d.kind() == "PrometheusRule" {
			// The spec must load as a Prometheus rule file, as the operator
			// hands it to Prometheus.
			spec, err := yamlMarshal(d.obj["spec"])
			if err != nil {
				p.addErr(d.file, err)
				continue
			}
			checkRuleGroups(d.file+" "+d.id()+" spec", spec, cat, nil, p)
		}
	}
	byKind := map[string][]doc{}
	ids := map[string]bool{}
	for _, d := range docs {
		byKind[d.kind()] = append(byKind[d.kind()], d)
		key := d.kind() + "/" + d.name()
		if ids[key] {
			p.add(d.file, "%s defined twice", key)
		}
		ids[key] = true
	}
	for _, k := range []string{"Deployment", "Job", "Service", "NetworkPolicy"} {
		if len(byKind[k]) == 0 {
			p.add(set, "no %s", k)
		}
	}
	if len(byKind["Deployment"]) != 1 {
		return // the cross-checks below assume the one Deployment
	}
	dep := byKind["Deployment"][0]
	podLabels := stringMap(get(dep.obj, "spec", "template", "metadata", "labels"))
	if !matches(stringMap(get(dep.obj, "spec", "selector", "matchLabels")), podLabels) {
		p.add(dep.file, "%s: spec.selector does not select the pod template's labels", dep.id())
	}
	// Pods: Deployment and Job share the conventions.
	images := map[string]string{}
	ports := map[string]int{}  // container port name -> number
	portNums := map[int]bool{} // container port numbers
	for _, d := range append(append([]doc{}, byKind["Deployment"]...), byKind["Job"]...) {
		spec := dict(d.obj, "spec", "template", "spec")
		checkPodSecurity(d, spec, p)
		for _, c := range list(spec, "containers") {
			cname := str(c, "name")
			where := fmt.Sprintf("%s container %s", d.id(), cname)
			images[d.id()] = str(c, "image")
			if img := str(c, "image"); !imagePinned(img) {
				p.add(d.file, "%s: image %q must be pinned to a tag (not latest) or a digest", where, img)
			}
			if str(c, "resources", "requests", "cpu") == "" && get(c, "resources", "requests", "cpu") == nil {
				p.add(d.file, "%s: resources.requests.cpu is required (the HPA scales on CPU utilisation of requests)", where)
			}
			if get(c, "resources", "limits", "memory") == nil || get(c, "resources", "requests", "memory") == nil {
				p.add(d.file, "%s: resources.requests.memory and limits.memory are required", where)
			}
			env := checkEnv(d, where, c, configSource, p)
			if d.kind() == "Deployment" {
				args := list(c, "args")
				if len(args) == 0 || args[0] != "serve" {
					p.add(d.file, "%s: args must start with serve", where)
				}
				for _, pt := range list(c, "ports") {
					n, _ := num(pt, "containerPort")
					ports[str(pt, "name")] = n
					portNums[n] = true
				}
				checkDeploymentEnv(d, where, c, env, p)
			} else if args := list(c, "args"); len(args) == 0 || args[0] != "migrate" {
				p.add(d.file, "%s: the Job must run migrate", where)
			}
		}
	}
	depImage := images[dep.id()]
	for _, d := range byKind["Job"] {
		if img := images[d.id()]; img != depImage {
			p.add(d.file, "%s runs image %q, the Deployment %q: the migrate Job must run the version it migrates for", d.id(), img, depImage)
		}
	}

	for _, d := range byKind["Service"] {
		if !matches(stringMap(get(d.obj, "spec", "selector")), podLabels) {
			p.add(d.file, "%s: selector does not select the Deployment's pods", d.id())
		}
		for _, sp := range list(d.obj, "spec", "ports") {
			switch tp := get(sp, "targetPort").(type) {
			case string:
				if _, ok := ports[tp]; !ok {
					p.add(d.file, "%s: targetPort %q is not a container port name", d.id(), tp)
				}
			case int:
				if !portNums[tp] {
					p.add(d.file, "%s: targetPort %d is not a container port", d.id(), tp)
				}
			}
		}
	}
	for _, d := range byKind["PodDisruptionBudget"] {
		if !matches(stringMap(get(d.obj, "spec", "selector", "matchLabels")), podLabels) {
			p.add(d.file, "%s: selector does not select the Deployment's pods", d.id())
		}
		checkIntOrPercent(d, p, "spec", "maxUnavailable")
		checkIntOrPercent(d, p, "spec", "minAvailable")
	}
	checkIntOrPercent(dep, p, "spec", "strategy", "rollingUpdate", "maxSurge")
	checkIntOrPercent(dep, p, "spec", "strategy", "rollingUpdate", "maxUnavailable")
	for _, d := range byKind["HorizontalPodAutoscaler"] {
		ref := dict(d.obj, "spec", "scaleTargetRef")
		if str(ref, "kind") != "Deployment" || str(ref, "name") != dep.name() || str(ref, "apiVersion") != "apps/v1" {
			p.add(d.file, "%s: scaleTargetRef must name apps/v1 Deployment %s", d.id(), dep.name())
		}
		minR, _ := num(d.obj, "spec", "minReplicas")
		maxR, _ := num(d.obj, "spec", "maxReplicas")
		if minR < 2 || minR > maxR {
			p.add(d.file, "%s: want 2 <= minReplicas (%d) <= maxReplicas (%d)", d.id(), minR, maxR)
		}
		// The HPA owns the replica count: a Deployment that sets one would
		// reset it on every apply.
		if _, set := num(dep.obj, "spec", "replicas"); set {
			p.add(d.file, "%s: the Deployment sets spec.replicas, which every apply would reset under the HPA", d.id())
		}
	}
	// Through an egress proxy, receivers are reached via the proxy only.
	proxied := false
	for _, c := range list(dep.obj, "spec", "template", "spec", "containers") {
		for _, e := range list(c, "env") {
			proxied = proxied || str(e, "name") == "DISPATCHER_EGRESS_PROXY"
		}
	}
	for _, d := range byKind["NetworkPolicy"] {
		checkNetworkPolicy(d, podLabels, portNums, proxied, p)
	}
	var svcs []doc = byKind["Service"]
	for _, d := range byKind["ServiceMonitor"] {
		sel := stringMap(get(d.obj, "spec", "selector", "matchLabels"))
		var svc *doc
		for i := range svcs {
			if matches(sel, stringMap(get(svcs[i].obj, "metadata", "labels"))) {
				svc = &svcs[i]
			}
		}
		if svc == nil {
			p.add(d.file, "%s: selector matches no Service's labels", d.id())
			continue
		}
		names := map[string]bool{}
		for _, sp := range list(svc.obj, "spec", "ports") {
			names[str(sp, "name")] = true
		}
		eps := list(d.obj, "spec", "endpoints")
		if len(eps) == 0 {
			p.add(d.file, "%s: no endpoints", d.id())
		}
		for _, ep := range eps {
			if !names[str(ep, "port")] {
				p.add(d.file, "%s: endpoint port %q is not a port name of Service %s", d.id(), str(ep, "port"), svc.name())
			}
			if path := str(ep, "path"); path != "" && path != "/metrics" {
				p.add(d.file, "%s: the dispatcher serves metrics at /metrics, not %s", d.id(), path)
			}
		}
	}
}

func checkPodSecurity(d doc, spec map[string]any, p *problems) {
	if get(spec, "securityContext", "runAsNonRoot") != true {
		p.add(d.file, "%s: pod securityContext.runAsNonRoot must be true", d.id())
	}
	if n, _ := num(spec, "securityContext", "runAsUser"); n == 0 {
		p.add(d.file, "%s: pod securityContext.runAsUser must be a non-zero uid (65532)", d.id())
	}
	if get(spec, "automountServiceAccountToken") != false {
		p.add(d.file, "%s: automountServiceAccountToken must be false (the dispatcher never calls the Kubernetes API)", d.id())
	}
	for _, c := range list(spec, "containers") {
		sc := dict(c, "securityContext")
		where := fmt.Sprintf("%s container %s", d.id(), str(c, "name"))
		if get(sc, "allowPrivilegeEscalation") != false || get(sc, "readOnlyRootFilesystem") != true {
			p.add(d.file, "%s: securityContext needs allowPrivilegeEscalation: false and readOnlyRootFilesystem: true", where)
		}
		drop := false
		for _, c := range list(sc, "capabilities", "drop") {
			drop = drop || c == "ALL"
		}
		if !drop {
			p.add(d.file, "%s: securityContext.capabilities.drop must include ALL", where)
		}
	}
}

// readConfigSource returns the text of cmd/dispatcher's Go files, where every
// environment variable the binary reads is spelled as a string literal.
func readConfigSource(repo string) string {
	var b strings.Builder
	matches, _ := filepath.Glob(filepath.Join(repo, "cmd", "dispatcher", "*.go"))
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		if c, err := os.ReadFile(m); err == nil {
			b.Write(c)
		}
	}
	return b.String()
}

// checkEnv verifies every variable is one the binary reads and that secrets
// come from a Secret, never a literal; it returns the literal values.
func checkEnv(d doc, where string, c any, configSource string, p *problems) map[string]string {
	vals := map[string]string{}
	seen := map[string]bool{}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		if seen[name] {
			p.add(d.file, "%s: env %s set twice", where, name)
		}
		seen[name] = true
		if !knownEnv[name] && !strings.Contains(configSource, strconv.Quote(name)) {
			p.add(d.file, "%s: env %s is not read by cmd/dispatcher (typo, or renamed in config.go?)", where, name)
		}
		if v, ok := get(e, "value").(string); ok {
			vals[name] = v
		} else if get(e, "value") != nil {
			p.add(d.file, "%s: env %s value must be a string (quote it)", where, name)
		}
		if isSecretEnv(name) && get(e, "valueFrom", "secretKeyRef") == nil {
			p.add(d.file, "%s: %s is a secret: take it from a Secret (valueFrom.secretKeyRef)", where, name)
		}
	}
	if len(list(c, "envFrom")) > 0 {
		p.add(d.file, "%s: use explicit env entries, so every variable is visible and checked", where)
	}
	return vals
}

func isSecretEnv(name string) bool {
	return name == "DATABASE_URL" || name == "DISPATCHER_DATABASE_URL" || name == "DISPATCHER_OUTBOX_DATABASE_URL" ||
		strings.HasSuffix(name, "_TOKENS") || strings.HasSuffix(name, "_TOKEN") || name == "DISPATCHER_MASTER_KEYS"
}

var sizeRE = regexp.MustCompile(`^(\d+)(Ki|Mi|Gi|KiB|MiB|GiB|B)?$`)

func bytesOf(s string) (int64, bool) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	switch strings.TrimSuffix(m[2], "B") {
	case "Ki":
		n <<= 10
	case "Mi":
		n <<= 20
	case "Gi":
		n <<= 30
	}
	return n, true
}

func checkDeploymentEnv(d doc, where string, c any, env map[string]string, p *problems) {
	ports := map[string]int{}
	for _, pt := range list(c, "ports") {
		n, _ := num(pt, "containerPort")
		ports[str(pt, "name")] = n
	}
	for envName, portName := range map[string]string{"DISPATCHER_GRPC_ADDR": "grpc", "DISPATCHER_OPS_ADDR": "ops"} {
		ap, err := netip.ParseAddrPort(env[envName])
		if err != nil || !ap.Addr().IsUnspecified() {
			p.add(d.file, "%s: %s must listen on all interfaces (0.0.0.0:port), got %q", where, envName, env[envName])
			continue
		}
		if int(ap.Port()) != ports[portName] {
			p.add(d.file, "%s: %s port %d differs from container port %q (%d)", where, envName, ap.Port(), portName, ports[portName])
		}
	}
	// The probes, with or without TLS: /healthz on the ops port (cached,
	// bounded, 503 while Postgres is unreachable) for startup and readiness,
	// a TCP connect to the gRPC port for liveness. Never the kubelet's gRPC
	// probe: the gRPC health service needs no token and shares a small read
	// budget, so unauthenticated stalled calls can make it answer
	// Unavailable (and it cannot speak TLS).
	portOf := func(v any, path ...string) int {
		if n, ok := num(v, path...); ok {
			return n
		}
		return ports[str(v, path...)]
	}
	scheme := "HTTP"
	if env["DISPATCHER_GRPC_TLS_CERT"] != "" {
		if env["DISPATCHER_OPS_TLS_CERT"] == "" {
			p.add(d.file, "%s: TLS on the gRPC port but not on the ops port, which carries River UI's credentials", where)
		}
	}
	if env["DISPATCHER_OPS_TLS_CERT"] != "" {
		scheme = "HTTPS"
	}
	for _, probe := range []string{"startupProbe", "readinessProbe"} {
		if str(c, probe, "httpGet", "path") != "/healthz" || str(c, probe, "httpGet", "scheme") != scheme ||
			portOf(c, probe, "httpGet", "port") != ports["ops"] {
			p.add(d.file, "%s: %s must GET /healthz over %s on the ops port %d (not the gRPC health service, which stalled unauthenticated calls can starve)", where, probe, scheme, ports["ops"])
		}
	}
	if portOf(c, "livenessProbe", "tcpSocket", "port") != ports["grpc"] {
		p.add(d.file, "%s: livenessProbe must be a tcpSocket probe on the gRPC port %d", where, ports["grpc"])
	}
	if env["DISPATCHER_EGRESS_ALLOW_CIDRS"] != "" {
		p.add(d.file, "%s: DISPATCHER_EGRESS_ALLOW_CIDRS weakens the SSRF guard; not in the production manifests", where)
	}
	grace, ok := num(d.obj, "spec", "template", "spec", "terminationGracePeriodSeconds")
	timeout := 20 * time.Second
	if s, set := env["DISPATCHER_SHUTDOWN_TIMEOUT"]; set {
		var err error
		if timeout, err = time.ParseDuration(s); err != nil {
			p.add(d.file, "%s: DISPATCHER_SHUTDOWN_TIMEOUT %q is not a duration", where, s)
		}
	}
	if need := timeout + serveShutdownOverhead; !ok || time.Duration(grace)*time.Second <= need {
		p.add(d.file, "%s: terminationGracePeriodSeconds %d must exceed DISPATCHER_SHUTDOWN_TIMEOUT (%s) + %s of shutdown overhead = %s",
			d.id(), grace, timeout, serveShutdownOverhead, need)
	}
	if ml, set := env["GOMEMLIMIT"]; set {
		limit, ok1 := bytesOf(str(c, "resources", "limits", "memory"))
		soft, ok2 := bytesOf(ml)
		if !ok1 || !ok2 || soft >= limit {
			p.add(d.file, "%s: GOMEMLIMIT %q must be below limits.memory %q", where, ml, str(c, "resources", "limits", "memory"))
		}
	}
}

func checkNetworkPolicy(d doc, podLabels map[string]string, portNums map[int]bool, proxied bool, p *problems) {
	if !matches(stringMap(get(d.obj, "spec", "podSelector", "matchLabels")), podLabels) {
		p.add(d.file, "%s: podSelector does not select the Deployment's pods", d.id())
	}
	types := map[string]bool{}
	for _, t := range list(d.obj, "spec", "policyTypes") {
		types[fmt.Sprint(t)] = true
	}
	if !types["Ingress"] || !types["Egress"] {
		p.add(d.file, "%s: policyTypes must include Ingress and Egress", d.id())
	}
	for _, r := range list(d.obj, "spec", "ingress") {
		if len(list(r, "from")) == 0 {
			p.add(d.file, "%s: an ingress rule without from admits every source", d.id())
		}
		for _, pt := range list(r, "ports") {
			if n, ok := num(pt, "port"); ok && !portNums[n] {
				p.add(d.file, "%s: ingress port %d is not a container port", d.id(), n)
			}
		}
	}
	dns, public := false, false
	for _, r := range list(d.obj, "spec", "egress") {
		ports := map[int]bool{}
		for _, pt := range list(r, "ports") {
			n, _ := num(pt, "port")
			ports[n] = true
		}
		if len(ports) == 0 {
			p.add(d.file, "%s: an egress rule without ports allows every port", d.id())
		}
		if ports[53] {
			dns = true
		}
		for _, to := range list(r, "to") {
			cidr := str(to, "ipBlock", "cidr")
			if cidr == "" {
				continue
			}
			pfx, err := netip.ParsePrefix(cidr)
			if err != nil {
				p.add(d.file, "%s: ipBlock %q: %v", d.id(), cidr, err)
				continue
			}
			if pfx.Bits() != 0 {
				continue
			}
			public = true
			except := map[string]bool{}
			for _, e := range list(to, "ipBlock", "except") {
				except[fmt.Sprint(e)] = true
			}
			if pfx.Addr().Is4() {
				var missing []string
				for _, want := range requiredExcepts {
					if !except[want] {
						missing = append(missing, want)
					}
				}
				if len(missing) > 0 {
					p.add(d.file, "%s: egress to 0.0.0.0/0 must except %s", d.id(), strings.Join(missing, ", "))
				}
			}
			for p2 := range ports {
				if p2 != 80 && p2 != 443 {
					p.add(d.file, "%s: egress to the internet is for receivers on 80/443, not port %d", d.id(), p2)
				}
			}
		}
	}
	if !dns {
		p.add(d.file, "%s: no egress rule for DNS (port 53)", d.id())
	}
	switch {
	case proxied && public:
		p.add(d.file, "%s: deliveries go through the egress proxy, yet egress to the internet is open", d.id())
	case !proxied && !public:
		p.add(d.file, "%s: no egress rule for receivers (0.0.0.0/0 minus private ranges)", d.id())
	}
}

// imagePinned: a digest, or a tag other than latest.
func imagePinned(img string) bool {
	if strings.Contains(img, "@sha256:") {
		return true
	}
	name := img[strings.LastIndex(img, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	return ok && tag != "" && tag != "latest"
}

var percentRE = regexp.MustCompile(`^[0-9]+%$`)

// checkIntOrPercent: the schema types these fields int-or-string, but the
// API server only accepts a string that is a percentage ("25%").
func checkIntOrPercent(d doc, p *problems, path ...string) {
	v := get(d.obj, path...)
	if v == nil {
		return
	}
	switch x := v.(type) {
	case int:
		if x < 0 {
			p.add(d.file, "%s: %s must not be negative", d.id(), strings.Join(path, "."))
		}
	case string:
		if !percentRE.MatchString(x) {
			p.add(d.file, "%s: %s %q must be a number or a percentage like \"25%%\"", d.id(), strings.Join(path, "."), x)
		}
	default:
		p.add(d.file, "%s: %s must be a number or a percentage", d.id(), strings.Join(path, "."))
	}
}
