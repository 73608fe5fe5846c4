package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// runPortalLinkCLI implements `dispatcher portal-link`: CreatePortalSession,
// printing the one-time link (the main application's backend does the same
// through the API; this is for operators and local development).
func runPortalLinkCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("portal-link", stderr)
	var conn cliConn
	conn.bind(fs, true)
	access := fs.String("access", "manage", "what the session may do: read (look only) or manage")
	ttl := fs.Duration("ttl", time.Hour, "how long the link and its session last (at most 24h)")
	var origins stringList
	fs.Var(&origins, "allowed-origin", "an origin that may frame the portal, https://host[:port] (repeatable or comma-separated; none: no framing)")
	displayName := fs.String("display-name", "", "the owner as its people know it, shown on every page (empty: the owner id)")
	returnURL := fs.String("return-url", "", "the way back to the application, an absolute http(s) URL, on every page and where the session ends")
	confirm := fs.Bool("confirm", false, "a link for email or chat: it opens a page whose button starts the session, so link previewers cannot spend it")
	productName := fs.String("product-name", "", "this session's product name in the portal's header (empty: the deployment's)")
	accent := fs.String("accent-color", "", "this session's accent colour, #rrggbb (empty: the deployment's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("portal-link: unexpected argument %q", fs.Arg(0))
	}
	if conn.owner == "" {
		return errors.New("portal-link: --owner is required")
	}
	req := &webhooksv1.CreatePortalSessionRequest{OwnerId: conn.owner, Ttl: durationpb.New(*ttl), AllowedOrigins: origins,
		DisplayName: *displayName, ReturnUrl: *returnURL, Confirm: *confirm}
	if *productName != "" || *accent != "" {
		req.Branding = &webhooksv1.PortalBranding{ProductName: *productName, AccentColor: *accent}
	}
	switch *access {
	case "read":
		req.Access = webhooksv1.PortalAccess_PORTAL_ACCESS_READ
	case "manage":
		req.Access = webhooksv1.PortalAccess_PORTAL_ACCESS_MANAGE
	default:
		return fmt.Errorf("portal-link: --access must be read or manage, not %q", *access)
	}
	cc, err := conn.dial(stderr)
	if err != nil {
		return fmt.Errorf("portal-link: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := webhooksv1.NewEndpointServiceClient(cc).CreatePortalSession(ctx, req)
	if err != nil {
		return callError("portal-link", err)
	}
	if conn.json {
		return printJSON(stdout, resp)
	}
	fmt.Fprintln(stdout, resp.GetUrl())
	fmt.Fprintf(stderr, "one-time link for %s (%s), valid until %s: opening it spends it\n",
		conn.owner, *access, resp.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
	return nil
}
