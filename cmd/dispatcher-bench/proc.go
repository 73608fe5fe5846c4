package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// clockTicks is USER_HZ, 100 on every Linux the bench runs on.
const clockTicks = 100

func buildDispatcher(ctx context.Context, out string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/standmeet/webhook-dispatcher/cmd/dispatcher")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/dispatcher: %w", err)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// credentials of one run (the children get them through the environment).
type credentials struct {
	masterKey string
	admin     string
	publisher string
}

func newCredentials() (credentials, error) {
	k, err := seal.GenerateMasterKey()
	if err != nil {
		return credentials{}, err
	}
	return credentials{masterKey: k, admin: "bench-admin-" + randomSuffix() + randomSuffix(),
		publisher: "bench-publisher-" + randomSuffix() + randomSuffix()}, nil
}

func (c credentials) adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.admin)
}

func (c credentials) publisherCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.publisher)
}

// proc is one running `dispatcher serve`.
type proc struct {
	name     string
	cmd      *exec.Cmd
	grpcAddr string
	opsAddr  string
	logs     *tailBuffer
	logFile  *os.File
	done     chan struct{}
	waitErr  error
	conn     *grpc.ClientConn
}

var servingRE = regexp.MustCompile(`grpc=(\S+) ops=http://(\S+)`)

// startProc runs `dispatcher serve --migrate` against schema and waits until
// it prints its addresses. The child dies with the bench (Pdeathsig) even if
// the bench itself is killed.
func (b *bench) startProc(ctx context.Context, name, schema string, creds credentials, env []string) (*proc, error) {
	cmd := exec.Command(b.cfg.Binary, "serve", "--migrate", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+b.dbURL,
		"DISPATCHER_SCHEMA="+schema,
		"DISPATCHER_MASTER_KEYS="+creds.masterKey,
		"DISPATCHER_ADMIN_TOKENS="+creds.admin,
		"DISPATCHER_PUBLISHER_TOKENS="+creds.publisher,
		"DISPATCHER_EGRESS_ALLOW_CIDRS=127.0.0.1/32",
		"DISPATCHER_LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	p := &proc{name: name, cmd: cmd, logs: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	var stderr io.Writer = p.logs
	if b.cfg.KeepLogs != "" {
		f, err := os.Create(filepath.Join(b.cfg.KeepLogs, schema+"-"+name+".log"))
		if err != nil {
			return nil, err
		}
		p.logFile = f
		stderr = io.MultiWriter(p.logs, f)
	}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", b.cfg.Binary, err)
	}
	b.mu.Lock()
	if b.procs == nil {
		b.procs = map[*proc]struct{}{}
	}
	b.procs[p] = struct{}{}
	b.mu.Unlock()

	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- m[1:]:
				default:
				}
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		if p.logFile != nil {
			_ = p.logFile.Close()
		}
		close(p.done)
	}()

	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	select {
	case a := <-addrs:
		p.grpcAddr, p.opsAddr = a[0], a[1]
	case <-p.done:
		b.forget(p)
		return nil, fmt.Errorf("%s exited before serving: %w\n%s", name, p.waitErr, p.logs.String())
	case <-timer.C:
		b.stopProc(p)
		return nil, fmt.Errorf("%s did not start within 90s\n%s", name, p.logs.String())
	case <-ctx.Done():
		b.stopProc(p)
		return nil, ctx.Err()
	}
	p.conn, err = grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.stopProc(p)
		return nil, err
	}
	return p, nil
}

func (b *bench) forget(p *proc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.procs, p)
}

// stopProc sends SIGTERM, waits for a clean exit (bounded), then kills.
func (b *bench) stopProc(p *proc) {
	defer b.forget(p)
	if p.conn != nil {
		_ = p.conn.Close()
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// kill ends the process (and anything it started) at once.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) endpoints() webhooksv1.EndpointServiceClient {
	return webhooksv1.NewEndpointServiceClient(p.conn)
}

func (p *proc) events() webhooksv1.EventServiceClient {
	return webhooksv1.NewEventServiceClient(p.conn)
}

// procSample is the process's CPU time and memory at one moment.
type procSample struct {
	at      time.Time
	cpuSecs float64
	rssKB   int64
	hwmKB   int64
}

// sample reads /proc/<pid>/stat (utime+stime) and /proc/<pid>/status
// (VmRSS, VmHWM).
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. utime and stime are fields 14 and 15 (1-based).
	str := string(raw)
	i := strings.LastIndexByte(str, ')')
	if i < 0 {
		return s, errors.New("malformed /proc stat")
	}
	f := strings.Fields(str[i+1:])
	if len(f) < 13 {
		return s, errors.New("malformed /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpuSecs = float64(ut+st) / clockTicks
	raw, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			s.rssKB = n
		case "VmHWM":
			s.hwmKB = n
		}
	}
	return s, nil
}

func (p *proc) sample() procSample {
	s, _ := sampleProc(p.cmd.Process.Pid)
	return s
}

// scrape sums the dispatcher's counters we report on, by family (labels
// summed): dispatcher_delivery_snoozes_total, dispatcher_deliveries_total
// (also per outcome), dispatcher_ingest_events_total; the ingest path's
// histograms (ingestHistogram); and the Go runtime's go_goroutines and
// go_memstats_heap_inuse_bytes (the soak's).
func (p *proc) scrape(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.opsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
			// The value follows the closing brace; label values may hold spaces.
			j := strings.LastIndexByte(line, '}')
			rest = strings.TrimSpace(line[j+1:])
		}
		if h, ok := ingestHistogram(name, labels); ok {
			if v, err := strconv.ParseFloat(strings.Fields(rest + " x")[0], 64); err == nil {
				out[h] += v
			}
			continue
		}
		switch name {
		case "dispatcher_delivery_snoozes_total", "dispatcher_deliveries_total", "dispatcher_ingest_events_total",
			"dispatcher_fanout_deliveries_enqueued_total", "dispatcher_relay_errors_total",
			"go_goroutines", "go_memstats_heap_inuse_bytes":
		default:
			continue
		}
		valStr, _, _ := strings.Cut(rest, " ")
		v, err := strconv.ParseFloat(valStr, 64)
		if err != nil {
			continue
		}
		out[name] += v
		if name == "dispatcher_deliveries_total" || name == "dispatcher_delivery_snoozes_total" {
			if m := labelRE.FindAllStringSubmatch(labels, -1); m != nil {
				for _, kv := range m {
					if kv[1] == "outcome" || kv[1] == "reason" {
						out[name+"/"+kv[2]] += v
					}
				}
			}
		}
	}
	return out, sc.Err()
}

var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)
