// Package endpoint stores an owner's webhook endpoints and carries out the
// operations on them (Service), with their rules: every request is validated
// here and answered with this package's errors. internal/grpcapi serves the
// operations as webhooks.v1.EndpointService.
//
// It is also the one place where signing secrets (or, for v1a endpoints,
// Ed25519 private keys: keypair.go), and the values of custom headers
// (headers.go), are sealed and unsealed: Create and RotateSecret seal
// a fresh key with the master keyring, OpenKeys and OpenHeaders unseal what a
// delivery needs, and Reseal re-seals everything stored after the master key
// rotates. A secret leaves this package in plaintext only in the reply to
// CreateEndpoint or RotateSecret, a header value never; neither is ever
// logged or part of an error.
//
// Every operation is scoped to an owner id. Another owner's endpoint, a
// deleted one and a malformed id all give the same NotFound, so no caller can
// learn whether an id exists elsewhere.
package endpoint
