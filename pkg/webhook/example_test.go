package webhook_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// A receiver: an http.Handler that accepts only correctly signed, fresh deliveries.
func Example() {
	// The endpoint's secret, shown once when the endpoint was created. Keep the old
	// secret in the list during a rotation.
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := webhook.NewVerifier(secret)
	if err != nil {
		log.Fatal(err)
	}

	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, _, err := verifier.VerifyRequest(r, 64<<10)
		switch {
		case errors.Is(err, webhook.ErrBodyTooLarge):
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			// Any 4xx other than 408/429 tells the dispatcher not to retry; a forged
			// or stale request should get exactly that.
			http.Error(w, "invalid webhook", http.StatusBadRequest)
			return
		}
		// Deliveries are at-least-once: skip ev.ID if it was already processed.
		// The payload is thin; fetch the content from the application's API.
		fmt.Printf("received %s about %s\n", ev.Type, ev.Subject)
		w.WriteHeader(http.StatusNoContent)
	})

	// What the dispatcher sends, simulated in-process.
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"id":"evt_01","type":"corpus.note.changed","subject":"wiki://software/project/standmeet/architecture",` +
		`"occurred_at":"2026-01-02T03:04:05Z","data":{"op":"updated","published":true,"was_published":true}}`)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/standmeet", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	webhook.SetHeaders(req.Header, [][]byte{key}, "evt_01", time.Now(), body)

	rec := httptest.NewRecorder()
	receiver.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// A replay with a tampered body is refused.
	req = httptest.NewRequest(http.MethodPost, "/webhooks/standmeet", bytes.NewReader(bytes.Replace(body, []byte("true"), []byte("false"), 1)))
	webhook.SetHeaders(req.Header, [][]byte{key}, "evt_01", time.Now(), body)
	rec = httptest.NewRecorder()
	receiver.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// Output:
	// received corpus.note.changed about wiki://software/project/standmeet/architecture
	// 204
	// 400
}

// The sender side: the reference vector from the Standard Webhooks libraries.
func ExampleSign() {
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)))
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}
