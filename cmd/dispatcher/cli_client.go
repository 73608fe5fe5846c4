package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
)

// cliDefaultAddr is where `dispatcher serve` listens by default.
const cliDefaultAddr = "127.0.0.1:7070"

// cliConn holds the flags every API-calling subcommand shares: where the
// server is, how to authenticate, and how to print.
type cliConn struct {
	addr      string
	caFile    string
	certFile  string
	keyFile   string
	json      bool
	owner     string
	timeout   time.Duration
	tls       bool
	tokenFile string
	env       *environ
}

func (c *cliConn) bind(fs *flag.FlagSet, withOwner bool) {
	c.env = osEnviron()
	env := c.env
	fs.StringVar(&c.addr, "addr", env.str("DISPATCHER_ADDR", cliDefaultAddr), "gRPC API address (env DISPATCHER_ADDR)")
	fs.StringVar(&c.tokenFile, "token-file", os.Getenv("DISPATCHER_TOKEN_FILE"),
		"file holding the API token: publisher for events publish, admin for everything else (default: env DISPATCHER_TOKEN; env DISPATCHER_TOKEN_FILE)")
	fs.BoolVar(&c.json, "json", false, "print the API response as JSON")
	fs.BoolVar(&c.tls, "tls", env.boolean("DISPATCHER_TLS", false), "connect with TLS (env DISPATCHER_TLS)")
	fs.StringVar(&c.caFile, "ca-file", os.Getenv("DISPATCHER_CA_FILE"), "PEM CA bundle to verify the server with --tls (default: system roots; env DISPATCHER_CA_FILE)")
	fs.StringVar(&c.certFile, "cert-file", os.Getenv("DISPATCHER_CERT_FILE"), "PEM client certificate for a server with mutual TLS; with --key-file, implies --tls (env DISPATCHER_CERT_FILE)")
	fs.StringVar(&c.keyFile, "key-file", os.Getenv("DISPATCHER_KEY_FILE"), "PEM key of --cert-file (env DISPATCHER_KEY_FILE)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of the call")
	if withOwner {
		fs.StringVar(&c.owner, "owner", os.Getenv("DISPATCHER_OWNER"), "owner id the endpoints and events belong to (env DISPATCHER_OWNER)")
	}
}

// token reads the API token: from --token-file when given, else from
// DISPATCHER_TOKEN. Never from a flag value, which would sit in shell history
// and process listings.
func (c *cliConn) token() (string, error) {
	if c.tokenFile != "" {
		toks, err := auth.LoadTokens("", c.tokenFile)
		if err != nil {
			return "", err
		}
		if len(toks) == 0 {
			return "", fmt.Errorf("token file %s holds no token", c.tokenFile)
		}
		return toks[0], nil
	}
	// A comma list (say, DISPATCHER_ADMIN_TOKENS copied over) means its
	// first token: no token can contain a comma, LoadTokens splits on it.
	if tok, _, _ := strings.Cut(os.Getenv("DISPATCHER_TOKEN"), ","); strings.TrimSpace(tok) != "" {
		return strings.TrimSpace(tok), nil
	}
	return "", errors.New("no API token: set DISPATCHER_TOKEN or pass --token-file")
}

// bearer attaches the token to every call.
type bearer struct {
	secure bool
	token  string
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so plain TCP works for a local server;
// dial warns when that would send the token across a network in clear.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

func (c *cliConn) dial(stderr io.Writer) (*grpc.ClientConn, error) {
	if err := c.env.err(); err != nil {
		return nil, err
	}
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	var creds credentials.TransportCredentials
	if c.tls || c.certFile != "" {
		c.tls = true
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.certFile != "" {
			cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
			if err != nil {
				return nil, fmt.Errorf("--cert-file/--key-file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		if c.caFile != "" {
			pem, err := os.ReadFile(c.caFile)
			if err != nil {
				return nil, fmt.Errorf("read --ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", c.caFile)
			}
			cfg.RootCAs = pool
		}
		creds = credentials.NewTLS(cfg)
	} else {
		if !isLoopbackAddr(c.addr) {
			fmt.Fprintf(stderr, "warning: sending the API token to %s without TLS; use --tls\n", c.addr)
		}
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(c.addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearer{secure: c.tls, token: tok}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	return conn, nil
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("get <id> --json" as well as "get --json <id>"); the standard
// flag package alone stops at the first positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// printJSON writes a response as protojson with the proto's field names.
// protojson deliberately varies its whitespace between builds, so the
// compact form is re-indented here: scripts and diffs get stable output.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// callError renders a gRPC failure for a terminal: the code and message, or,
// when the status names bad fields, the code and each field on its own line
// (the message only repeats the first of them).
func callError(cmd string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	var violations []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			violations = append(violations, br.GetFieldViolations()...)
		}
	}
	var b strings.Builder
	if len(violations) == 0 {
		fmt.Fprintf(&b, "%s: %s: %s", cmd, st.Code(), st.Message())
		return errors.New(b.String())
	}
	fmt.Fprintf(&b, "%s: %s:", cmd, st.Code())
	for _, v := range violations {
		fmt.Fprintf(&b, "\n  %s: %s", v.GetField(), v.GetDescription())
	}
	return errors.New(b.String())
}
