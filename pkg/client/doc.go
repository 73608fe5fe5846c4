// Package client is the main application's Go client of the dispatcher: it
// publishes events to webhooks.v1.EventService (the other way in is the
// outbox table, pkg/outbox).
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
// There is a builder function per type of the dispatcher's event catalog
// (CodeIssued, CorpusNoteChanged, …) taking that type's data as a struct
// (CodeIssuedData, with typed enums such as CorpusNoteChangedOpUpdated), and a
// Type… constant for each, generated from the catalog and its JSON Schemas by
// internal/clientgen (`make generate`): a type the client offers is one the
// dispatcher delivers, with the fields its schema allows. The schema's other
// rules (lengths, formats) are checked by the dispatcher, which answers
// InvalidArgument naming the field ("event.data"). NewEvent with Set, Data or
// DataJSON builds any event by hand.
package client

//go:generate go run ../../internal/clientgen -o events.go
