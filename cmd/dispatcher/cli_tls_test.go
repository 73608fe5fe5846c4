package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload"
	"github.com/standmeet/webhook-dispatcher/internal/tlsreload/tlstest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

type cliTLSEndpoints struct {
	webhooksv1.UnimplementedEndpointServiceServer
}

func (cliTLSEndpoints) ListEventTypes(context.Context, *webhooksv1.ListEventTypesRequest) (*webhooksv1.ListEventTypesResponse, error) {
	return &webhooksv1.ListEventTypesResponse{EventTypes: []*webhooksv1.EventType{{Name: "code.issued"}}}, nil
}

// TestCLIMutualTLS: the CLI reaches a server that requires client
// certificates with --cert-file/--key-file, and not without them.
func TestCLIMutualTLS(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		addr                              string
		caFile, certFile, keyFile, tokens string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		dir := t.TempDir()
		b := &testBundle{
			caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "client.crt"), keyFile: filepath.Join(dir, "client.key"),
			tokens: filepath.Join(dir, "token"),
		}
		serverCA, clientCA := tlstest.NewCA(t, "server-ca"), tlstest.NewCA(t, "client-ca")
		serverCert, serverKey, clientCAFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
		serverCA.Server(t).Write(t, serverCert, serverKey, time.Now())
		clientCA.Client(t).Write(t, b.certFile, b.keyFile, time.Now())
		require.NoError(t, os.WriteFile(b.caFile, serverCA.PEM, 0o600))
		require.NoError(t, os.WriteFile(clientCAFile, clientCA.PEM, 0o600))
		require.NoError(t, os.WriteFile(b.tokens, []byte(cliTestAdminToken+"\n"), 0o600))

		certs, err := tlsreload.New(tlsreload.Config{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: clientCAFile}, nil)
		require.NoError(t, err)
		tc, err := certs.ServerConfig()
		require.NoError(t, err)
		authn, err := auth.New(auth.Tokens{Admin: []string{cliTestAdminToken}}, nil)
		require.NoError(t, err)
		srv := grpc.NewServer(append(grpcapi.ServerOptions(authn), grpc.Creds(credentials.NewTLS(tc)))...)
		webhooksv1.RegisterEndpointServiceServer(srv, cliTLSEndpoints{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		b.addr = lis.Addr().String()
		return b
	}

	run := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := runEventTypesCLI(t.Context(), args, &out, &out)
		return out.String(), err
	}

	t.Run("ClientCertificateAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := run(t, "--addr", b.addr, "--token-file", b.tokens, "--ca-file", b.caFile,
			"--cert-file", b.certFile, "--key-file", b.keyFile, "--timeout", "10s")
		require.NoError(t, err, out)
		require.Contains(t, out, "code.issued")
	})

	t.Run("WithoutOneRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := run(t, "--addr", b.addr, "--token-file", b.tokens, "--ca-file", b.caFile, "--tls", "--timeout", "5s")
		require.Error(t, err, out)
	})

	t.Run("HalfAPairIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := run(t, "--addr", b.addr, "--token-file", b.tokens, "--cert-file", b.certFile)
		require.ErrorContains(t, err, "--cert-file and --key-file go together")
	})
}
