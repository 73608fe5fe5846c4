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
	require.Equal(t, textproto.CanonicalMIMEHeaderKey(HeaderID), canonicalHeaderID)
	require.Equal(t, textproto.CanonicalMIMEHeaderKey(HeaderTimestamp), canonicalHeaderTimestamp)
	require.Equal(t, textproto.CanonicalMIMEHeaderKey(HeaderSignature), canonicalHeaderSignature)
}
