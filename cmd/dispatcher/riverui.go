package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
)

// mountRiverUI serves River UI at /riverui/ behind the operator token, so the
// job links of ListDeliveries open a real page. Job args hold only ids, but
// args are hidden by default anyway.
func mountRiverUI(ctx context.Context, mux *http.ServeMux, client *river.Client[pgx.Tx], authn *auth.Authenticator, logger *slog.Logger) error {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints:                riverui.NewEndpoints(client, nil),
		Logger:                   logger.With(slog.String("component", "riverui")),
		Prefix:                   "/riverui",
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return fmt.Errorf("river UI: %w", err)
	}
	if authn.Count(auth.RoleOperator) == 0 {
		logger.WarnContext(ctx, "River UI is on but no operator token is configured (DISPATCHER_OPERATOR_TOKENS): nobody can open it")
	}
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("start river UI: %w", err)
	}
	mux.Handle("/riverui/", authn.RequireHTTP(auth.RoleOperator, h))
	return nil
}
