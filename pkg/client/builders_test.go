package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestBuilders(t *testing.T) {
	t.Parallel()

	t.Run("OnePerCatalogType", func(t *testing.T) {
		t.Parallel()
		var want []string
		for _, ti := range catalog.Default().TypesOf(catalog.ExposureWebhook) {
			want = append(want, ti.Name)
		}
		require.Equal(t, want, client.Types())
	})

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		before := time.Now().Add(-time.Second)
		ev, err := client.BookingCreated("owner_1", "booking://b_1", client.BookingCreatedData{}).Event()
		require.NoError(t, err)
		require.Equal(t, client.TypeBookingCreated, ev.Type)
		require.NotEmpty(t, ev.ID)
		require.True(t, ev.OccurredAt.After(before))
		require.JSONEq(t, `{}`, string(ev.Data))
		again, err := client.BookingCreated("owner_1", "booking://b_1", client.BookingCreatedData{}).Event()
		require.NoError(t, err)
		require.NotEqual(t, ev.ID, again.ID)
	})

	t.Run("InvalidNamesTheField", func(t *testing.T) {
		t.Parallel()
		_, err := client.OwnerLogin("", "owner://o", client.OwnerLoginData{}).Event()
		var fe *webhook.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, webhook.FieldOwnerID, fe.Field)

		_, err = client.NewEvent(client.TypeOwnerLogin, "owner_1", "owner://o").Set("bad", func() {}).Event()
		require.ErrorContains(t, err, "data")

		_, err = client.OwnerLogin("owner_1", "owner://o", client.OwnerLoginData{}).Set("ip", "x").Event()
		require.ErrorContains(t, err, "set the field instead")
	})

	t.Run("DataJSON", func(t *testing.T) {
		t.Parallel()
		ev, err := client.NewEvent(client.TypeGasRefilled, "owner_1", "gas://g").Set("dropped", 1).DataJSON([]byte(`{"amount":5}`)).Event()
		require.NoError(t, err)
		require.JSONEq(t, `{"amount":5}`, string(ev.Data))
	})
}
