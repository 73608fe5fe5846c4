// Package e2e tests the dispatcher through its real binary: built once, run
// as a child process against a fresh Postgres schema, driven over gRPC and
// observed at real HTTP receivers.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

const (
	adminToken     = "e2e-admin-token-0123456789abcdef0123"
	publisherToken = "e2e-publisher-token-0123456789abcdef0123"
	operatorToken  = "e2e-operator-token-0123456789abcdef0123"
)

var binary string

func TestMain(m *testing.M) {
	if prebuilt := os.Getenv("DISPATCHER_E2E_BINARY"); prebuilt != "" {
		binary = prebuilt
		os.Exit(dbtest.WithCleanup(m).Run())
	}
	dir, err := os.MkdirTemp("", "dispatcher-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dispatcher")
	build := exec.Command("go", "build", "-o", binary, "../cmd/dispatcher")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build dispatcher:", err)
		os.Exit(1)
	}
	code := dbtest.WithCleanup(m).Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a child's output safely.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dispatcher is one running dispatcher process.
type dispatcher struct {
	cmd      *exec.Cmd
	grpcAddr string
	opsAddr  string
	logs     *syncBuffer
	done     chan error
	conn     *grpc.ClientConn
}

type options struct {
	db        *dbtest.DB
	masterKey string
	env       []string
	args      []string
}

var servingRE = regexp.MustCompile(`grpc=(\S+) ops=https?://(\S+)`)

func masterKey(t *testing.T) string {
	t.Helper()
	k, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	return k
}

// running bounds the dispatcher processes this binary runs at once, eight:
// each holds up to DISPATCHER_DB_MAX_CONNS=3 pool connections plus two
// LISTEN sessions, so make test stays near 40 Postgres connections however
// the parallel tests overlap. Only -parallel tests run at a time, but a
// test whose parallel subtests wait for their turn keeps its process until
// they are done, so several processes sit idle at any moment; with fewer
// slots (three, once) most starts waited out runningWait behind idle ones,
// and the package took over 30 minutes while the machine idled. A test that
// has waited runningWait starts its process anyway, so two tests that each
// need a second process while holding one cannot wait on each other for
// ever.
var running = make(chan struct{}, 8)

const runningWait = 45 * time.Second

// takeSlot waits for a free slot and returns its release.
func takeSlot(t *testing.T) func() {
	t.Helper()
	select {
	case running <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-running }) }
	case <-time.After(runningWait):
		t.Logf("e2e: started a dispatcher beyond the %d at once, after waiting %s", cap(running), runningWait)
		return func() {}
	}
}

// start runs `dispatcher serve` and waits until it prints its addresses.
func start(t *testing.T, opts options) *dispatcher {
	t.Helper()
	if opts.masterKey == "" {
		opts.masterKey = masterKey(t)
	}
	release := takeSlot(t)
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0"}, opts.args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+opts.db.URL,
		"DISPATCHER_SCHEMA="+opts.db.Schema,
		"DISPATCHER_MASTER_KEYS="+opts.masterKey,
		"DISPATCHER_ADMIN_TOKENS="+adminToken,
		"DISPATCHER_PUBLISHER_TOKENS="+publisherToken,
		"DISPATCHER_OPERATOR_TOKENS="+operatorToken,
		"DISPATCHER_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"DISPATCHER_LOG_LEVEL=debug",
		"DISPATCHER_DB_MAX_CONNS=3", // plus its LISTEN sessions: see running
		"DISPATCHER_DELIVER_WORKERS=20",
	)
	cmd.Env = append(cmd.Env, opts.env...)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if err := cmd.Start(); err != nil {
		release()
		require.NoError(t, err)
	}

	d := &dispatcher{cmd: cmd, logs: logs, done: make(chan error, 1)}
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m[1:]
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		release() // its connections are closed with it
		d.done <- err
	}()
	t.Cleanup(func() { d.stop(t) })

	select {
	case a := <-addrs:
		d.grpcAddr, d.opsAddr = a[0], a[1]
	case err := <-d.done:
		d.done <- err
		t.Fatalf("dispatcher exited before serving: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("dispatcher did not start in time\n%s", logs.String())
	}
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	d.conn = conn
	return d
}

// stop sends SIGTERM and waits for a clean exit.
func (d *dispatcher) stop(t *testing.T) {
	t.Helper()
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(45 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// kill sends SIGKILL, so the process gets no chance to clean up (its leases
// stay taken, its jobs stay running), and waits until it is gone.
func (d *dispatcher) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case err := <-d.done:
		_ = err // "signal: killed", as intended
	case <-time.After(10 * time.Second):
		t.Fatalf("dispatcher pid %d still alive 10s after SIGKILL", d.cmd.Process.Pid)
	}
}

// exited reports whether the process has ended on its own (without kill or
// stop), and how.
func (d *dispatcher) exited() (bool, error) {
	select {
	case err := <-d.done:
		d.done <- err // keep it for stop
		return true, err
	default:
		return false, nil
	}
}

func (d *dispatcher) endpoints() webhooksv1.EndpointServiceClient {
	return webhooksv1.NewEndpointServiceClient(d.conn)
}

func (d *dispatcher) events() webhooksv1.EventServiceClient {
	return webhooksv1.NewEventServiceClient(d.conn)
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func adminCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return withToken(ctx, adminToken)
}

func publisherCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return withToken(ctx, publisherToken)
}

// get fetches a path on the ops port.
func (d *dispatcher) get(t *testing.T, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+d.opsAddr+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// getAPI fetches a path on the API port (the HTTP/JSON API's).
func (d *dispatcher) getAPI(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + d.grpcAddr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

// receiver records every request and answers with handler (200 by default).
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	handler func(http.ResponseWriter, *http.Request)
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: body, at: time.Now()})
		h := rc.handler
		rc.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) setHandler(h func(http.ResponseWriter, *http.Request)) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.handler = h
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
