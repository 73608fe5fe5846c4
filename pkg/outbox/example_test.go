package outbox_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
)

// Publishing an event together with the change it describes: the outbox row
// commits or rolls back with the note update, so receivers hear about exactly
// the changes that happened. (Not run: it needs the main application's database.)
func ExampleWrite() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const noteID = "n_42"
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE notes SET published = true WHERE id = $1`, noteID); err != nil {
			return err
		}
		return outbox.Write(ctx, tx, outbox.Event{
			ID:         "0190f3a4-6b7c-7d8e-9f00-112233445566",
			OwnerID:    "owner_1",
			Type:       "corpus.note.changed",
			Subject:    "wiki://software/project/standmeet/architecture",
			OccurredAt: time.Now(),
			// Thin: enough to decide what to fetch, never the note itself.
			Data: map[string]any{"op": "updated", "note_id": noteID, "published": true, "was_published": false},
		})
	})
	if fieldErr, ok := errors.AsType[*outbox.FieldError](err); ok {
		log.Printf("bad event, field %s: %s", fieldErr.Field, fieldErr.Reason)
		return
	}
	if err != nil {
		log.Print(err)
	}
}
