package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

const listenUsage = `usage: dispatcher listen --owner <owner> [flags]

Runs a webhook receiver here, for trying the dispatcher out: it creates an
endpoint for the owner pointing at itself (or reuses the one it made before
for the same URL, enabling it, taking a new secret and keeping its event
types unless --event-types is given), verifies every delivery's Standard
Webhooks signature with pkg/webhook, prints it, and answers --status.
Verification failures are answered 401. Ctrl-C stops it; the endpoint
stays, for the next run.

Without --listen it takes the first free port of 127.0.0.1:8000-8009, so a
second listen (say with --status 503) runs beside the first with an
endpoint of its own. Each line shows the delivery's age: the time from the
event's occurred_at to its arrival here (an event published with an old
--occurred-at is old on arrival).

The dispatcher must be allowed to reach it: make run allows loopback
(DISPATCHER_EGRESS_ALLOW_CIDRS).
`

// listenSeen bounds how many event ids the attempt counter remembers.
const listenSeen = 10000

// Without --listen, listen takes the first free port from listenFirstPort
// on, trying listenPorts of them: a fixed set, so that each run in a slot
// finds the endpoint (the same URL) a previous run there made.
const (
	listenHost      = "127.0.0.1"
	listenFirstPort = 8000
	listenPorts     = 10
)

func runListenCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("listen", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), listenUsage+"\n")
		fs.PrintDefaults()
	}
	var conn cliConn
	conn.bind(fs, true)
	listen := fs.String("listen", "", fmt.Sprintf("address to receive deliveries on (default: the first free port of %s:%d-%d; port 0: any free port)",
		listenHost, listenFirstPort, listenFirstPort+listenPorts-1))
	url := fs.String("url", "", "URL the endpoint gets (default: http://<listen address>/hooks); for a listener behind a proxy or tunnel")
	var types stringList
	fs.Var(&types, "event-types", `event type globs the endpoint hears, comma-separated or repeated (default: "*" for a new endpoint, a reused one keeps its own)`)
	status := fs.Int("status", http.StatusNoContent, "HTTP status to answer verified deliveries with: a 2xx, or e.g. 500 or 429 to watch the retries")
	pidDir := fs.String("pid-dir", os.Getenv("DISPATCHER_LISTEN_PID_DIR"),
		"directory to record this process in (<pid>.pid, removed on exit), so that make stop finds and stops it; make run sets it in .data/dev.env (env DISPATCHER_LISTEN_PID_DIR)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("listen: unexpected argument %q", fs.Arg(0))
	}
	if conn.owner == "" {
		return errors.New("listen: --owner (or DISPATCHER_OWNER) is required")
	}
	if *status < 200 || *status > 599 {
		return fmt.Errorf("invalid --status %d: want 200..599", *status)
	}

	lis, err := listenOn(ctx, *listen, listenFirstPort, listenPorts)
	if err != nil {
		return err
	}
	defer lis.Close()
	if *pidDir != "" {
		remove, err := writePidFile(*pidDir, lis.Addr().String())
		if err != nil {
			return fmt.Errorf("listen: --pid-dir: %w", err)
		}
		defer remove()
	}
	if *url == "" {
		*url = "http://" + lis.Addr().String() + "/hooks"
	}

	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer cc.Close()
	client := webhooksv1.NewEndpointServiceClient(cc)
	callCtx, cancel := context.WithTimeout(ctx, conn.timeout)
	ep, secret, reused, err := listenEndpoint(callCtx, client, conn.owner, *url, types)
	cancel()
	if err != nil {
		return callError("listen", err)
	}
	verifier, err := webhook.NewVerifier(secret)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	how, kept := "created", ""
	if reused {
		how = "reusing"
		if len(types) == 0 {
			kept = "; kept, --event-types changes them"
		}
	}
	fmt.Fprintf(stdout, "listen: %s endpoint %s for owner %s → %s (event types %s%s)\n",
		how, ep.GetId(), conn.owner, *url, strings.Join(ep.GetEventTypes(), ","), kept)
	fmt.Fprintf(stdout, "listen: answering %d to verified deliveries on %s; Ctrl-C stops\n", *status, lis.Addr())

	r := &receiver{verifier: verifier, status: *status, out: stdout, attempts: map[string]int{}}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	fmt.Fprintf(stdout, "listen: stopped; endpoint %s stays (dispatcher endpoints delete --owner %s %s removes it)\n", ep.GetId(), conn.owner, ep.GetId())
	return nil
}

// writePidFile records this process in dir as <pid>.pid, holding the pid
// and the address it listens on, for scripts/stop-dev.sh (make stop), and
// returns what removes it.
func writePidFile(dir, addr string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pid := strconv.Itoa(os.Getpid())
	path := filepath.Join(dir, pid+".pid")
	if err := os.WriteFile(path, []byte(pid+" "+addr+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(path) }, nil
}

// listenOn opens the receiver's socket: addr when given, else the first free
// of n ports from first on listenHost. A port in use is explained with the
// flag that picks another.
func listenOn(ctx context.Context, addr string, first, n int) (net.Listener, error) {
	lc := new(net.ListenConfig)
	if addr != "" {
		lis, err := lc.Listen(ctx, "tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen: %s is in use (another dispatcher listen?): pick another address with --listen, e.g. --listen %s:0 for any free port", addr, listenHost)
		}
		if err != nil {
			return nil, fmt.Errorf("listen: --listen %s: %w", addr, err)
		}
		return lis, nil
	}
	for port := first; port < first+n; port++ {
		lis, err := lc.Listen(ctx, "tcp", net.JoinHostPort(listenHost, strconv.Itoa(port)))
		if err == nil {
			return lis, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	return nil, fmt.Errorf("listen: ports %d-%d of %s are all in use: pick an address with --listen, e.g. --listen %s:0 for any free port",
		first, first+n-1, listenHost, listenHost)
}

// listenEndpoint finds the owner's endpoint for url, or creates it (hearing
// types, or "*"), and returns a secret this process can verify with: a
// created endpoint's, or a new one for a reused endpoint (the API never
// shows a secret twice; the old one keeps signing for a minute beside it, so
// nothing in flight fails). A reused endpoint keeps its event types unless
// types are given.
func listenEndpoint(ctx context.Context, client webhooksv1.EndpointServiceClient, owner, url string, types []string) (*webhooksv1.Endpoint, string, bool, error) {
	var found *webhooksv1.Endpoint
	for page := ""; found == nil; {
		resp, err := client.ListEndpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: owner, PageSize: 200, PageToken: page})
		if err != nil {
			return nil, "", false, err
		}
		for _, ep := range resp.GetEndpoints() {
			if ep.GetUrl() == url {
				found = ep
				break
			}
		}
		if page = resp.GetNextPageToken(); page == "" {
			break
		}
	}
	if found == nil {
		if len(types) == 0 {
			types = []string{"*"}
		}
		resp, err := client.CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
			OwnerId: owner, Url: url, EventTypes: types, Description: "dispatcher listen",
		})
		if err != nil {
			return nil, "", false, err
		}
		return resp.GetEndpoint(), resp.GetSecret(), false, nil
	}
	mask := []string{"enabled"}
	if len(types) > 0 {
		mask = append(mask, "event_types")
	}
	upd, err := client.UpdateEndpoint(ctx, &webhooksv1.UpdateEndpointRequest{
		OwnerId: owner, EndpointId: found.GetId(), EventTypes: types, Enabled: true,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: mask},
	})
	if err != nil {
		return nil, "", false, err
	}
	rot, err := client.RotateSecret(ctx, &webhooksv1.RotateSecretRequest{
		OwnerId: owner, EndpointId: found.GetId(), GracePeriod: durationpb.New(time.Minute),
	})
	if err != nil {
		return nil, "", false, err
	}
	return upd.GetEndpoint(), rot.GetSecret(), true, nil
}

// receiver verifies and prints each delivery.
type receiver struct {
	verifier *webhook.Verifier
	status   int
	out      io.Writer

	mu sync.Mutex
	// attempts counts the deliveries seen per event id, for a server that
	// does not say which attempt a request is (job.AttemptHeader): a retry
	// carries the same webhook-id, so the count is the attempt number as
	// seen here, which misses the attempts made while no listen ran.
	attempts map[string]int
}

// attemptSaid says which attempt r is: the server's count from its
// job.AttemptHeader ("attempt 4 of 18, 2 probes"), else the count seen here.
func attemptSaid(r *http.Request, seen int) string {
	if n, ok := job.ParseAttemptHeader(r.Header.Get(job.AttemptHeader)); ok {
		return n.String()
	}
	return fmt.Sprintf("attempt %d (seen here)", seen)
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	ev, body, err := rc.verifier.VerifyRequest(r, 0)
	id := r.Header.Get("webhook-id")
	if ev != nil {
		id = ev.ID
	}

	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.attempts) >= listenSeen {
		clear(rc.attempts)
	}
	rc.attempts[id]++
	attempt := attemptSaid(r, rc.attempts[id])

	if err != nil {
		fmt.Fprintf(rc.out, "%s  %s %s  %s  %s  verified ✗ (%v)  → 401\n",
			at.UTC().Format(time.RFC3339), r.Method, r.URL.Path, orDash(id), attempt, err)
		http.Error(w, "signature verification failed", http.StatusUnauthorized)
		return
	}
	var data bytes.Buffer
	if json.Compact(&data, ev.Data) != nil {
		data.Reset()
		data.Write(ev.Data)
	}
	fmt.Fprintf(rc.out, "%s  %s  %s  %s  %s  verified ✓  age %s  → %d\n  data %s (%d bytes)\n",
		at.UTC().Format(time.RFC3339), ev.ID, ev.Type, ev.Subject, attempt,
		at.Sub(ev.OccurredAt).Round(time.Millisecond), rc.status, data.String(), len(body))
	w.WriteHeader(rc.status)
}
