package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestListenOn(t *testing.T) {
	t.Parallel()

	// busyPort holds a loopback port whose next port is free at the time.
	busyPort := func(t *testing.T) int {
		t.Helper()
		for range 20 {
			held, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			port := held.Addr().(*net.TCPAddr).Port
			next, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
			if err != nil {
				_ = held.Close()
				continue
			}
			require.NoError(t, next.Close())
			t.Cleanup(func() { _ = held.Close() })
			return port
		}
		t.Fatal("no two free consecutive loopback ports")
		return 0
	}

	t.Run("DefaultTakesTheNextFreePort", func(t *testing.T) {
		t.Parallel()
		port := busyPort(t)
		lis, err := listenOn(t.Context(), "", port, 2)
		require.NoError(t, err)
		defer lis.Close()
		require.Equal(t, port+1, lis.Addr().(*net.TCPAddr).Port)
	})

	t.Run("DefaultRangeFullNamesTheFlag", func(t *testing.T) {
		t.Parallel()
		port := busyPort(t)
		_, err := listenOn(t.Context(), "", port, 1)
		require.ErrorContains(t, err, "all in use: pick an address with --listen")
	})

	t.Run("GivenAddressInUseNamesTheFlag", func(t *testing.T) {
		t.Parallel()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(busyPort(t)))
		_, err := listenOn(t.Context(), addr, 0, 0)
		require.ErrorContains(t, err, "listen: "+addr+" is in use (another dispatcher listen?): pick another address with --listen")
	})

	t.Run("GivenAddressUsed", func(t *testing.T) {
		t.Parallel()
		lis, err := listenOn(t.Context(), "127.0.0.1:0", 0, 0)
		require.NoError(t, err)
		require.NoError(t, lis.Close())
	})
}
