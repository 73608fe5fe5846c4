package main

// The container image (make image) is the binary alone, with no CA bundle
// beside it: these roots, Mozilla's set as Go's x/crypto ships it, verify
// receivers' and the access service's TLS certificates there. Anywhere the
// system has roots of its own, those are used and these stay unused.
import _ "golang.org/x/crypto/x509roots/fallback"
