// Package webhook implements Standard Webhooks (https://www.standardwebhooks.com) v1
// signing and verification, and is the home of the dispatcher's thin event: its
// fields ([Event]), the rules every event must pass ([Event.Validate], with its limits
// as constants), its exact wire encoding ([Event.Payload]) and its decoding ([Decode]).
// The main application's outbox writer, the dispatcher and Go receivers all use this
// one definition.
//
// It is the single home of signing in this module: the dispatcher's deliver worker
// signs with [SignatureHeader] (or [SetHeaders]), and receivers written in Go verify
// with a [Verifier]. Keeping both sides in one package means a change to the
// signed-content layout cannot drift between sender and receiver.
//
// A delivery looks like this on the wire:
//
//	POST <endpoint url>
//	content-type: application/json
//	webhook-id: <event id, the same on every retry>
//	webhook-timestamp: <unix seconds of this attempt>
//	webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>
//
//	{"id":"…","type":"…","subject":"…","occurred_at":"…","data":{…}}
//
// Both schemes of the spec are implemented: "v1", HMAC-SHA256 with a shared secret
// (whsec_…), and "v1a", Ed25519 with a key pair (the sender signs with the private
// key, whsk_…; receivers verify with the public key, whpk_…, and so hold nothing that
// could forge a message). A header may carry entries of both, and a Verifier skips
// the entries of a scheme it holds no key for.
//
// Receivers should also deduplicate on the webhook-id header (the event id): the
// dispatcher delivers at least once and retries carry the same id.
package webhook
