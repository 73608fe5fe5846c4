package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/standmeet/webhook-dispatcher/pkg/client"
)

// Publishing an event, twice: the second Publish finds it stored and
// delivers nothing more; it prints
//
//	true PUBLISH_OUTCOME_STORED
//	true PUBLISH_OUTCOME_DUPLICATE
//
// (Not run here: it needs a dispatcher, on loopback, so without TLS. The
// dispatcher's own tests run the same calls against the real server.)
func Example() {
	ev, err := client.CodeIssued("owner_1", "code://c_123", client.CodeIssuedData{CodeID: "c_123"}).Event()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial("127.0.0.1:7070", client.WithToken(os.Getenv("DISPATCHER_PUBLISHER_TOKENS")), client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for range 2 {
		res, err := c.Publish(ctx, ev)
		if err != nil {
			fmt.Println("publish:", err)
			return
		}
		fmt.Println(res.GetEventId() == ev.ID, res.GetOutcome())
	}
}

// The builder of a catalog type sets the type and takes the type's data;
// the id and occurred_at are defaulted, and the event is checked against
// the dispatcher's rules for every event.
func ExampleCorpusNoteChanged() {
	ev, err := client.CorpusNoteChanged("owner_1", "wiki://software/project/standmeet/architecture",
		client.CorpusNoteChangedData{Op: client.CorpusNoteChangedOpUpdated, NoteID: "n1", Published: true, WasPublished: true}).
		ID("evt_note_1").
		Event()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.ID, ev.Type, string(ev.Data))

	_, err = client.CodeIssued("owner_1", "not a uri", client.CodeIssuedData{}).Event()
	fmt.Println(err)
	// Output:
	// evt_note_1 corpus.note.changed {"op":"updated","note_id":"n1","published":true,"was_published":true}
	// client: invalid event.subject: must be a URI with a scheme, like "wiki://path"
}
