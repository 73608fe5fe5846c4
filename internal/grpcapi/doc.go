// Package grpcapi is the dispatcher's gRPC surface: webhooks.v1.EventService
// over ingest, webhooks.v1.EndpointService over endpoint, the Gate that
// decides who may call what (from a call's headers, before its message is
// read) and makes an undecodable request the client's error, and the one
// mapping from the domain's errors to gRPC statuses.
//
// The packages behind it keep the rules and the storage and know nothing of
// gRPC: they answer with their own errors (an *endpoint.ValidationError or an
// *ingest.InvalidEventsError naming each bad field, endpoint.ErrNotFound, an
// *ingest.ConflictError …), and this package turns them into codes and
// google.rpc details in one place, so every method answers the same mistake
// the same way.
package grpcapi
