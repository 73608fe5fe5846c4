"""The client against a real dispatcher.

The Go test TestPythonClient (e2e/) builds and starts the binary (loopback
receivers allowed) and runs these tests with its address and tokens in
DISPATCHER_URL, DISPATCHER_ADMIN_TOKEN and DISPATCHER_PUBLISHER_TOKEN; without
them the tests are skipped (unless DISPATCHER_PYTHON_LIVE=1, when they fail).
"""

from __future__ import annotations

import http.server
import os
import threading
import time
import unittest
import uuid

from dispatcher_client import Client, Delivery, Endpoint, ProblemError, PublishResult, Webhook

URL = os.environ.get("DISPATCHER_URL", "")
LIVE = bool(URL) or os.environ.get("DISPATCHER_PYTHON_LIVE") == "1"

BOOKING = {"booking_id": "bk_31", "starts_at": "2026-12-03T15:00:00Z", "ends_at": "2026-12-03T15:30:00Z"}


class Receiver:
    """A loopback receiver answering 204 and keeping every request."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(what: str, check, seconds: float = 60.0):
    """Poll check until it answers something truthy; the bound is a liveness bound for a loaded machine."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@unittest.skipUnless(LIVE, "DISPATCHER_URL is not set: the Go test TestPythonClient (e2e/) runs these against the binary")
class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.admin = Client(URL, os.environ.get("DISPATCHER_ADMIN_TOKEN", ""))
        self.publisher = Client(URL, os.environ.get("DISPATCHER_PUBLISHER_TOKEN", ""))
        self.owner = "owner-py-" + uuid.uuid4().hex[:8]
        self.receiver = Receiver()
        self.addCleanup(self.receiver.close)

    def test_publish_deliver_verify_and_admin_calls(self) -> None:
        key = str(uuid.uuid4())
        created = self.admin.create_endpoint(owner_id=self.owner, url=self.receiver.url, event_types=["booking.*"],
                                             description="python", idempotency_key=key)
        self.assertIsInstance(created.endpoint, Endpoint)
        assert created.endpoint is not None
        self.assertTrue(created.secret.startswith("whsec_"))
        self.assertFalse(created.replayed)
        again = self.admin.create_endpoint(owner_id=self.owner, url=self.receiver.url, event_types=["booking.*"],
                                           description="python", idempotency_key=key)
        self.assertTrue(again.replayed, "the same Idempotency-Key answers the first call's endpoint")
        assert again.endpoint is not None
        self.assertEqual(again.endpoint.id, created.endpoint.id)
        endpoint_id = created.endpoint.id

        # A misspelt type is refused, naming the field, with a did-you-mean.
        with self.assertRaises(ProblemError) as refused:
            self.publisher.publish(owner_id=self.owner, type="booking.craeted", subject="booking://31", data=BOOKING)
        self.assertEqual(refused.exception.status, 400)
        self.assertEqual(refused.exception.code, "INVALID_ARGUMENT")
        self.assertEqual([v.field for v in refused.exception.field_violations], ["event.type"])
        self.assertIn('did you mean "booking.created"?', refused.exception.detail)

        published = self.publisher.publish(owner_id=self.owner, type="booking.created", subject="booking://31", data=BOOKING)
        self.assertIsInstance(published, PublishResult)
        self.assertEqual(published.outcome, "PUBLISH_OUTCOME_STORED")
        self.assertTrue(published.event_id)
        self.assertTrue(published.occurred_at)

        headers, body = wait_for("the delivery", lambda: self.receiver.received[:1])[0]
        payload = Webhook(created.secret).verify(body, headers)
        self.assertEqual(payload["type"], "booking.created")
        self.assertEqual(payload["data"], BOOKING)
        self.assertEqual(headers["webhook-id"], published.event_id)

        # Deliveries, one delivery, its attempts.
        def delivered() -> list[Delivery]:
            page = self.admin.list_deliveries(owner_id=self.owner, endpoint_id=endpoint_id)
            return [d for d in page.items if d.state == "DELIVERY_STATE_DELIVERED"]

        (delivery,) = wait_for("the delivery recorded as delivered", delivered)
        self.assertEqual(delivery.event_id, published.event_id)
        self.assertEqual(self.admin.get_delivery(owner_id=self.owner, delivery_id=delivery.id).id, delivery.id)
        # The attempt's record is written apart from the delivery's state (batched).
        attempts = wait_for("the attempt recorded", lambda: self.admin.list_attempts(owner_id=self.owner, delivery_id=delivery.id).items)
        self.assertEqual([a.http_status for a in attempts], [204])
        with self.assertRaises(ProblemError) as finished:
            self.admin.retry_delivery(owner_id=self.owner, delivery_id=delivery.id)
        self.assertEqual(finished.exception.code, "FAILED_PRECONDITION")
        self.assertEqual(self.admin.redeliver(owner_id=self.owner, endpoint_id=endpoint_id).count, 0)
        # Resent on request: the same webhook-id once more.
        resent = self.admin.retry_delivery(owner_id=self.owner, delivery_id=delivery.id, resend=True)
        self.assertEqual(resent.id, delivery.id)
        again, _ = wait_for("the resend", lambda: self.receiver.received[1:2])[0]
        self.assertEqual(again["webhook-id"], published.event_id)
        wait_for("the resend recorded as delivered", delivered)

        # Events.
        got = self.admin.get_event(owner_id=self.owner, event_id=published.event_id)
        assert got.event is not None
        self.assertEqual(got.event.type, "booking.created")
        self.assertEqual([d.id for d in got.deliveries], [delivery.id])
        self.assertIn(published.event_id, [e.id for e in self.admin.iter_events(owner_id=self.owner)])

        # Endpoints.
        updated = self.admin.update_endpoint(owner_id=self.owner, endpoint_id=endpoint_id, update_mask=["description"], description="billing")
        self.assertEqual(updated.description, "billing")
        self.assertEqual(self.admin.get_endpoint(owner_id=self.owner, endpoint_id=endpoint_id).description, "billing")
        self.assertEqual([e.id for e in self.admin.iter_endpoints(owner_id=self.owner)], [endpoint_id])
        stats = self.admin.get_endpoint_stats(owner_id=self.owner, endpoint_ids=[endpoint_id])
        self.assertEqual([s.endpoint_id for s in stats], [endpoint_id])
        tested = self.admin.test_filter(owner_id=self.owner, filter={"data.booking_id": "bk_1"}, event_types=["booking.*"],
                                        sample={"owner_id": self.owner, "type": "booking.created", "subject": "booking://31", "data": BOOKING})
        self.assertFalse(tested.matched)
        self.assertIn("data.booking_id", tested.explanation)
        test_event = self.admin.send_test(owner_id=self.owner, endpoint_id=endpoint_id)
        self.assertTrue(test_event)
        rotated = self.admin.rotate_secret(owner_id=self.owner, endpoint_id=endpoint_id)
        self.assertNotEqual(rotated.secret, created.secret)
        names = [t.name for t in self.admin.list_event_types()]
        self.assertIn("booking.created", names)
        try:
            link = self.admin.create_portal_session(owner_id=self.owner, access="PORTAL_ACCESS_READ", ttl="600s")
            self.assertIn("/portal/", link.url)
            self.assertTrue(link.expires_at)
        except ProblemError as e:  # a dispatcher without a portal
            self.assertEqual(e.code, "UNIMPLEMENTED", e)

        self.admin.delete_endpoint(owner_id=self.owner, endpoint_id=endpoint_id)
        with self.assertRaises(ProblemError) as gone:
            self.admin.get_endpoint(owner_id=self.owner, endpoint_id=endpoint_id)
        self.assertEqual((gone.exception.status, gone.exception.code), (404, "NOT_FOUND"))

    def test_publish_batch_and_errors(self) -> None:
        results = self.publisher.publish_batch([
            {"owner_id": self.owner, "type": "booking.created", "subject": "booking://1", "data": BOOKING},
            {"owner_id": self.owner, "type": "booking.created", "subject": "booking://2", "data": BOOKING},
        ])
        self.assertEqual([r.outcome for r in results], ["PUBLISH_OUTCOME_STORED"] * 2)
        with self.assertRaises(ProblemError) as bad:
            self.publisher.publish_batch([{"owner_id": self.owner, "type": "booking.created", "subject": "", "data": BOOKING}])
        self.assertEqual(bad.exception.code, "INVALID_ARGUMENT")
        self.assertEqual([v.field for v in bad.exception.field_violations], ["events[0].subject"])
        with self.assertRaises(ProblemError) as wrong_token:
            Client(URL, "not-a-token").list_event_types()
        self.assertEqual(wrong_token.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
