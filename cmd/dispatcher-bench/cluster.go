package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ownCluster is a Postgres cluster the bench makes for the soak: initdb
// into a temporary directory and a server on a free loopback port, with
// Postgres's own defaults but for where it listens and how many
// connections it takes. Autovacuum in particular is as Postgres ships it,
// so the soak shows whether the tables level off under the vacuuming a
// production server does by default, and no other load on a shared server
// (nor its settings) shapes the figures.
type ownCluster struct {
	bindir string
	dir    string
	port   int
	// owner runs the server programs when the bench runs as root (initdb
	// refuses root): the postgres user.
	owner string
}

// ownClusterSettings are the only settings changed from initdb's: where it
// listens, the connections the bench's processes take, and
// pg_stat_statements when installed (statements per delivery).
func (c *ownCluster) settings() string {
	s := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200", c.port)
	if fileExists(filepath.Join(filepath.Dir(c.bindir), "lib", "pg_stat_statements.so")) {
		s += " -c shared_preload_libraries=pg_stat_statements"
	}
	return s
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// startOwnCluster creates and starts the cluster; stop removes it.
func startOwnCluster(ctx context.Context) (*ownCluster, error) {
	bindir, err := pgBindir()
	if err != nil {
		return nil, fmt.Errorf("%w (or pass -soak-cluster=false to soak on -database-url)", err)
	}
	c := &ownCluster{bindir: bindir}
	if c.dir, err = os.MkdirTemp("", "dispatcher-bench-pg"); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(c.dir)
			return nil, fmt.Errorf("running as root, the soak's cluster needs the postgres user to own it (initdb refuses root): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.dir, uid, gid); err != nil {
			_ = os.RemoveAll(c.dir)
			return nil, err
		}
		c.owner = u.Username
	}
	// A port free now; nothing else on loopback is expected to take it in
	// the moment before the server does.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(c.dir)
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	if err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		_ = os.RemoveAll(c.dir)
		return nil, err
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "server.log"),
		"-o", c.settings(), "-w", "-t", "120", "start"); err != nil {
		_ = os.RemoveAll(c.dir)
		return nil, err
	}
	return c, nil
}

func (c *ownCluster) data() string { return filepath.Join(c.dir, "data") }

// URL is the cluster's postgres database.
func (c *ownCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// stop stops the server and removes the cluster.
func (c *ownCluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = c.run(ctx, "pg_ctl", "-D", c.data(), "-m", "fast", "-w", "-t", "60", "stop")
	_ = os.RemoveAll(c.dir)
}

func (c *ownCluster) run(ctx context.Context, program string, args ...string) error {
	path := filepath.Join(c.bindir, program)
	var cmd *exec.Cmd
	if c.owner != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.owner, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = "/" // a directory the owner can enter, whoever runs the bench
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", program, err, out)
	}
	return nil
}

// pgBindir finds the newest installed Postgres server programs (initdb and
// pg_ctl).
func pgBindir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	more, _ := filepath.Glob("/usr/pgsql-*/bin")
	dirs = append(dirs, more...)
	version := func(bindir string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(bindir)), "pgsql-"))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("no Postgres server programs (initdb, pg_ctl) in /usr/lib/postgresql/*/bin, pg_config --bindir or PATH")
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
