package event

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// FuzzValidateData feeds arbitrary JSON objects to every type's schema. It
// must never panic; a refusal is a *webhook.FieldError naming a path inside
// data, whose reason is valid UTF-8 and never repeats a value of the data
// (only the schema's own words).
func FuzzValidateData(f *testing.F) {
	for _, ti := range WebhookTypes() {
		f.Add(ti.Name, string(ti.Example))
	}
	f.Add(TypeNoteChanged, `{"op":"moved","published":"SECRET_VALUE_1"}`)
	f.Add("booking.created", `{"starts_at":"SECRET_VALUE_2","x":[{"y":1}]}`)
	f.Fuzz(func(t *testing.T, typ, data string) {
		t.Parallel()
		if !json.Valid([]byte(data)) || !strings.HasPrefix(strings.TrimSpace(data), "{") {
			return
		}
		err := ValidateData(typ, json.RawMessage(data))
		if err == nil {
			return
		}
		var fe *webhook.FieldError
		require.ErrorAs(t, err, &fe)
		require.True(t, fe.Field == webhook.FieldData || strings.HasPrefix(fe.Field, webhook.FieldData+".") ||
			strings.HasPrefix(fe.Field, webhook.FieldData+"["), fe.Field)
		require.True(t, utf8.ValidString(fe.Reason))
		var values map[string]any
		if json.Unmarshal([]byte(data), &values) == nil {
			schema := string(Schema(typ))
			for _, v := range values {
				if s, ok := v.(string); ok && len(s) >= 8 && !strings.Contains(schema, s) {
					require.NotContains(t, fe.Reason, s)
				}
			}
		}
	})
}
