package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// listener is one running `dispatcher listen`.
type listener struct {
	cmd        *exec.Cmd
	out        *syncBuffer
	done       chan error
	endpointID string
	url        string
}

var listenRE = regexp.MustCompile(`listen: (created|reusing) endpoint (\S+) for owner \S+ → (\S+)`)

// startListen runs `dispatcher listen` against d and waits for its endpoint.
func startListen(t *testing.T, d *dispatcher, args ...string) *listener {
	t.Helper()
	return startListenEnv(t, d, nil, args...)
}

// startListenEnv is startListen with env added to the environment.
func startListenEnv(t *testing.T, d *dispatcher, env []string, args ...string) *listener {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"listen", "--addr", d.grpcAddr}, args...)...)
	cmd.Env = append(append(os.Environ(), "DISPATCHER_TOKEN="+adminToken), env...)
	l := &listener{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = l.out, l.out
	require.NoError(t, cmd.Start())
	go func() { l.done <- cmd.Wait() }()
	t.Cleanup(func() { l.stop(t) })
	waitFor(t, 30*time.Second, "listen to announce its endpoint", func() bool {
		select {
		case err := <-l.done:
			l.done <- err
			t.Fatalf("listen exited: %v\n%s", err, l.out.String())
		default:
		}
		return listenRE.MatchString(l.out.String())
	})
	m := listenRE.FindStringSubmatch(l.out.String())
	l.endpointID, l.url = m[2], m[3]
	return l
}

// stop interrupts listen as Ctrl-C does and waits for it to exit cleanly.
func (l *listener) stop(t *testing.T) {
	t.Helper()
	if l.cmd.ProcessState != nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-l.done:
		l.done <- err
		require.NoError(t, err, l.out.String())
	case <-time.After(10 * time.Second):
		_ = l.cmd.Process.Kill()
		t.Fatalf("listen did not stop on SIGINT\n%s", l.out.String())
	}
}

// cli runs one dispatcher command with token and returns its output.
func cli(t *testing.T, d *dispatcher, token string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "DISPATCHER_ADDR="+d.grpcAddr, "DISPATCHER_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var publishedRE = regexp.MustCompile(`published event (\S+) \(stored`)

// TestListenAndPublish is the README's quick start through the real binary:
// `dispatcher listen` as the receiver, `dispatcher events publish` as the
// application.
func TestListenAndPublish(t *testing.T) {
	t.Parallel()

	type testBundle struct{ d *dispatcher }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{d: start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})}
	}
	const owner = "listen-owner"

	t.Run("DeliveryVerifiedAndPrinted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := startListen(t, b.d, "--owner", owner, "--listen", "127.0.0.1:0", "--event-types", "corpus.*")
		require.Contains(t, l.out.String(), "listen: created endpoint")

		out, err := cli(t, b.d, publisherToken, "events", "publish", "--owner", owner,
			"--type", "corpus.note.changed", "--subject", "wiki://software/project/x", "--data", `{"op":"updated","published":true}`)
		require.NoError(t, err, out)
		m := publishedRE.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		id := m[1]
		// Neither --id nor --occurred-at: the server filled both in and said so.
		require.Regexp(t, `^published event [0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12} \(stored.*\), occurred_at 20\d\d-`, out)

		line := regexp.MustCompile(`\S+  ` + regexp.QuoteMeta(id) + `  corpus\.note\.changed  wiki://software/project/x  attempt 1 of 18  verified ✓  age \S+  → 204\n  data \{"op":"updated","published":true\}`)
		waitFor(t, 30*time.Second, "listen to print the delivery", func() bool { return line.MatchString(l.out.String()) })

		// The same event again is a duplicate, and nothing new arrives.
		again := []string{"events", "publish", "--owner", owner, "--id", "evt-listen-1", "--occurred-at", "2026-11-30T10:00:00Z",
			"--type", "corpus.note.changed", "--subject", "wiki://software/project/x", "--data", `{"op":"updated","published":true}`}
		out, err = cli(t, b.d, publisherToken, again...)
		require.NoError(t, err, out)
		require.Contains(t, out, "published event evt-listen-1 (stored")
		waitFor(t, 30*time.Second, "listen to print it", func() bool { return strings.Contains(l.out.String(), "  evt-listen-1  ") })
		out, err = cli(t, b.d, publisherToken, again...)
		require.NoError(t, err, out)
		require.Contains(t, out, "published event evt-listen-1 (duplicate")
		require.Contains(t, out, "occurred_at 2026-11-30T10:00:00Z")

		// The endpoint id can be captured for the commands that take one.
		out, err = cli(t, b.d, adminToken, "endpoints", "list", "--owner", owner, "-q")
		require.NoError(t, err, out)
		require.Equal(t, l.endpointID+"\n", out)

		// A forged delivery is refused and shown as such.
		resp, err := http.Post(l.url, "application/json", strings.NewReader(`{"id":"forged"}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		waitFor(t, 30*time.Second, "listen to print the forgery", func() bool {
			return strings.Contains(l.out.String(), "verified ✗") && strings.Contains(l.out.String(), "→ 401")
		})
		require.Equal(t, 2, strings.Count(l.out.String(), "verified ✓"), "the duplicate was not delivered")

		l.stop(t)
		require.Contains(t, l.out.String(), "listen: stopped; endpoint "+l.endpointID+" stays")
	})

	t.Run("StatusShowsRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		l := startListen(t, b.d, "--owner", owner, "--listen", "127.0.0.1:0", "--status", "503")
		out, err := cli(t, b.d, publisherToken, "events", "publish", "--owner", owner,
			"--type", "booking.created", "--subject", "booking://42")
		require.NoError(t, err, out)
		id := publishedRE.FindStringSubmatch(out)[1]
		// The next request is the recovery probe, 15 s after the first
		// failure (the delivery's own retry, 5 s after it, is held: the
		// endpoint is failing), which spends no attempt of the schedule:
		// listen prints the server's count.
		second := regexp.MustCompile(regexp.QuoteMeta(id+"  booking.created  booking://42  ") +
			`(attempt 2 of 18|probe 1, after attempt 1 of 18)  verified ✓`)
		waitFor(t, 40*time.Second, "the second attempt", func() bool {
			return second.MatchString(l.out.String())
		})
		require.Contains(t, l.out.String(), id+"  booking.created  booking://42  attempt 1 of 18  verified ✓")
		require.Contains(t, l.out.String(), "→ 503")
	})

	t.Run("ReusesItsEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A fixed port, so the second run has the same URL.
		probe, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := probe.Addr().String()
		require.NoError(t, probe.Close())

		first := startListen(t, b.d, "--owner", owner, "--listen", addr, "--event-types", "booking.*")
		first.stop(t)
		// Without --event-types a reused endpoint keeps its own.
		second := startListen(t, b.d, "--owner", owner, "--listen", addr)
		require.Contains(t, second.out.String(), "listen: reusing endpoint "+first.endpointID)
		require.Contains(t, second.out.String(), "(event types booking.*; kept, --event-types changes them)")
		out, err := cli(t, b.d, adminToken, "endpoints", "get", "--owner", owner, first.endpointID)
		require.NoError(t, err, out)
		require.Regexp(t, `event types:\s+booking\.\*\n`, out)

		// A second listen beside it on the same address is told which flag
		// picks another.
		out, err = cli(t, b.d, adminToken, "listen", "--owner", owner, "--listen", addr)
		require.Error(t, err)
		require.Contains(t, out, "listen: "+addr+" is in use (another dispatcher listen?): pick another address with --listen")

		// The rotated secret is the one it verifies with.
		out, err = cli(t, b.d, publisherToken, "events", "publish", "--owner", owner,
			"--type", "booking.created", "--subject", "booking://7", "--data", `{}`)
		require.NoError(t, err, out)
		id := publishedRE.FindStringSubmatch(out)[1]
		waitFor(t, 30*time.Second, "the delivery", func() bool {
			return strings.Contains(second.out.String(), id+"  booking.created  booking://7  attempt 1 of 18  verified ✓")
		})
	})

	t.Run("PublishBadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := cli(t, b.d, publisherToken, "events", "publish", "--owner", owner, "--type", "Not A Type", "--subject", "booking://1")
		require.Error(t, err)
		require.Contains(t, out, "InvalidArgument")
		require.Contains(t, out, "\n  event.type: ")

		out, err = cli(t, b.d, publisherToken, "events", "publish", "--owner", owner, "--type", "booking.created", "--subject", "booking://1", "--data", `[1]`)
		require.Error(t, err)
		require.Contains(t, out, "invalid --data")

		out, err = cli(t, b.d, adminToken, "events", "publish", "--owner", owner, "--type", "booking.created", "--subject", "booking://1")
		require.Error(t, err)
		require.Contains(t, out, "PermissionDenied", "publishing takes the publisher token")
	})
}

// TestStopDevStopsListen: make stop and make clean (scripts/stop-dev.sh)
// stop the `dispatcher listen` receivers run with the clone's .data/dev.env,
// which records them under .data/listen (DISPATCHER_LISTEN_PID_DIR): each
// gets SIGTERM, stops cleanly, and its record is gone. The script runs from
// a copy in a scratch clone, whose .data holds nothing else.
func TestStopDevStopsListen(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	clone := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(clone, "scripts"), 0o755))
	script, err := os.ReadFile("../scripts/stop-dev.sh")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(clone, "scripts", "stop-dev.sh"), script, 0o755))
	pidDir := filepath.Join(clone, ".data", "listen")
	env := []string{"DISPATCHER_LISTEN_PID_DIR=" + pidDir}

	stopDev := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := exec.Command("bash", append([]string{filepath.Join(clone, "scripts", "stop-dev.sh")}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	exited := func(t *testing.T, l *listener) {
		t.Helper()
		select {
		case err := <-l.done:
			l.done <- err
			require.NoError(t, err, "a clean stop\n%s", l.out.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("listen still runs\n%s", l.out.String())
		}
		require.Contains(t, l.out.String(), "listen: stopped; endpoint "+l.endpointID+" stays")
	}

	first := startListenEnv(t, d, env, "--owner", "stop-owner", "--listen", "127.0.0.1:0")
	second := startListenEnv(t, d, env, "--owner", "stop-owner", "--listen", "127.0.0.1:0", "--status", "503")
	entries, err := os.ReadDir(pidDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{strconv.Itoa(first.cmd.Process.Pid) + ".pid", strconv.Itoa(second.cmd.Process.Pid) + ".pid"}, names,
		"each listen records itself")

	out := stopDev(t)
	for _, l := range []*listener{first, second} {
		require.Contains(t, out, fmt.Sprintf("stop-dev: stopped dispatcher listen (pid %d, on %s)", l.cmd.Process.Pid, strings.TrimSuffix(strings.TrimPrefix(l.url, "http://"), "/hooks")))
		exited(t, l)
	}
	entries, err = os.ReadDir(pidDir)
	require.NoError(t, err)
	require.Empty(t, entries, "no record left")

	// make clean stops them too, before it removes .data.
	third := startListenEnv(t, d, env, "--owner", "stop-owner", "--listen", "127.0.0.1:0")
	out = stopDev(t, "--clean")
	require.Contains(t, out, fmt.Sprintf("stop-dev: stopped dispatcher listen (pid %d", third.cmd.Process.Pid))
	exited(t, third)
	require.NoDirExists(t, filepath.Join(clone, ".data"))

	// A record whose process is gone, or is not a listen, is only removed.
	require.NoError(t, os.MkdirAll(pidDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(pidDir, "1.pid"), []byte("1 127.0.0.1:1\n"), 0o600))
	out = stopDev(t)
	require.NotContains(t, out, "stopped dispatcher listen")
	require.NoFileExists(t, filepath.Join(pidDir, "1.pid"))
}
