// Package client is the Go client of the dispatcher's gRPC API: Client
// publishes events to webhooks.v1.EventService (the main application's way
// in besides the outbox table, pkg/outbox), and Admin manages endpoints
// through webhooks.v1.EndpointService (what an admin UI's backend does).
//
//	c, err := client.Dial("dispatcher:7070", client.WithToken(publisherToken))
//	...
//	ev, err := client.CodeIssued("owner_1", "code://c_123", client.CodeIssuedData{CodeID: "c_123"}).Event()
//	...
//	res, err := c.Publish(ctx, ev) // res.GetOutcome(): STORED, or DUPLICATE if it was already
//
// A main app that traces with OpenTelemetry passes its gRPC instrumentation,
// and the dispatcher's spans (ingest, fanout, every delivery attempt) join
// the app's trace:
//
//	client.WithDialOptions(grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
//
// Publish and PublishBatch retry while the dispatcher is Unavailable, with a
// bounded, jittered exponential backoff (Retry); publishing is idempotent by
// event id, so a retry never delivers twice.
//
// Before an event is sent, Publish checks it against the event catalog
// (pkg/catalog, the same code the dispatcher runs): the default catalog, or
// the one the dispatcher is configured with (WithCatalog). A mistake is
// answered as the dispatcher would, InvalidArgument naming the field
// ("event.data.op"), without a call. Given the dispatcher's catalog, a type
// in none of it is such a mistake too, answered with the nearest type
// ("did you mean \"booking.created\"?"); AllowUnknownTypes sends it anyway.
//
// There is a builder function per type of the default event catalog
// (CodeIssued, CorpusNoteChanged, …) taking that type's data as a struct
// (CodeIssuedData, with typed enums such as CorpusNoteChangedOpUpdated), and a
// Type… constant for each, generated from the catalog and its JSON Schemas by
// internal/clientgen (`make generate`). NewEvent with Set, Data or DataJSON
// builds any event by hand, such as one of a catalog of your own.
//
// # Managing endpoints
//
//	a, err := client.DialAdmin("dispatcher:7070", client.WithToken(adminToken))
//	...
//	created, err := a.CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
//		OwnerId: "owner_1", Url: "https://hooks.example.com/in", EventTypes: []string{"corpus.*"},
//	})
//	for ep, err := range a.Endpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: "owner_1"}) {
//		...
//	}
//	if errors.Is(err, client.ErrNotFound) { … }
//
// Admin makes every EndpointService call: endpoints, deliveries (GetDelivery,
// RetryDelivery, Redeliver, and Recover for the whole recovery after an
// outage), attempts, stats, events with the fanout's decision, and the event
// types. Deliveries and attempts count the retry schedule's attempts ("4 of
// 18") and recovery probes apart.
//
// Lists are iterators that fetch page after page; errors are *Error, matched
// with errors.Is against ErrNotFound, ErrInvalidArgument (Error.Violations
// names each bad field) and the other sentinels. Admin retries only while the
// dispatcher is Unavailable, as Client does.
package client

//go:generate go run -C ../.. ./internal/clientgen -o pkg/client/events.go
