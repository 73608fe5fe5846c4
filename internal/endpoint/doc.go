// Package endpoint stores an owner's webhook endpoints and carries out the
// operations on them (Service), with their rules: every request is validated
// here and answered with this package's errors. internal/grpcapi serves the
// operations as webhooks.v1.EndpointService.
//
// It is also the one place where signing secrets are sealed and unsealed:
// Create and RotateSecret seal a fresh key with the master keyring, OpenKeys
// unseals the keys a delivery signs with, and Reseal re-seals every stored
// key after the master key rotates. A secret leaves this package in
// plaintext only in the reply to CreateEndpoint or RotateSecret; it is never
// logged and never part of an error.
//
// Every operation is scoped to an owner id. Another owner's endpoint, a
// deleted one and a malformed id all give the same NotFound, so no caller can
// learn whether an id exists elsewhere.
package endpoint
