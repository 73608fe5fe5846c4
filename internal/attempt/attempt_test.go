package attempt

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestText(t *testing.T) {
	t.Parallel()

	t.Run("InvalidUTF8AndNULAreReplaced", func(t *testing.T) {
		t.Parallel()
		s := Text([]byte("ok\x00\xff\xfe<b>"), 100)
		require.True(t, utf8.ValidString(s))
		require.Equal(t, "ok\uFFFD\uFFFD<b>", s, "NUL and each invalid byte become U+FFFD; markup stays as text")
	})

	t.Run("CutToTheLimitOnARuneBoundary", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ab", Text([]byte("abé"), 3), "half of é is dropped, not replaced")
		require.Equal(t, "abc", Text([]byte("abcdef"), 3))
		require.Len(t, Text([]byte(strings.Repeat("x", 5000)), DefaultBodyBytes), DefaultBodyBytes)
	})

	t.Run("ZeroKeepsNothing", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Text([]byte("body"), 0))
	})
}
