package webhook

import (
	"net/textproto"
	"testing"

	"github.com/stretchr/testify/require"
)

// SetHeaders stores the headers under their canonical names itself; they
// must be exactly the keys http.Header.Set would use.
func TestCanonicalHeaderNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, canonicalHeaderID, textproto.CanonicalMIMEHeaderKey(HeaderID))
	require.Equal(t, canonicalHeaderTimestamp, textproto.CanonicalMIMEHeaderKey(HeaderTimestamp))
	require.Equal(t, canonicalHeaderSignature, textproto.CanonicalMIMEHeaderKey(HeaderSignature))
}
