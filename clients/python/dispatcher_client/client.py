"""The dispatcher's HTTP/JSON API from Python, standard library only.

    from dispatcher_client import Client

    publisher = Client("http://127.0.0.1:7070", token=publisher_token)
    result = publisher.publish(owner_id="acme", type="booking.created", subject="booking://31",
                               data={"booking_id": "bk_31", ...})
    admin = Client("http://127.0.0.1:7070", token=admin_token)
    created = admin.create_endpoint(owner_id="acme", url="https://hooks.example.com/in",
                                    event_types=["booking.*"])

Every call answers a dataclass of the API's answer (snake_case, as on the
wire; timestamps and durations as the API writes them, 64-bit ids as strings)
or raises ProblemError, the API's RFC 9457 problem: status, code (the gRPC
code's name, e.g. "INVALID_ARGUMENT"), detail and field_violations. A type in
no event catalog is refused: INVALID_ARGUMENT naming event.type, with a
did-you-mean in detail.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


# --- answers -------------------------------------------------------------------


@dataclasses.dataclass
class FieldViolation:
    field: str = ""
    description: str = ""


@dataclasses.dataclass
class Endpoint:
    id: str = ""
    owner_id: str = ""
    url: str = ""
    name: str = ""
    description: str = ""
    event_types: list[str] = dataclasses.field(default_factory=list)
    embed_id: str = ""
    enabled: bool = False
    disabled_reason: str = ""
    filter: dict[str, Any] | None = None
    header_names: list[str] = dataclasses.field(default_factory=list)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    max_in_flight: int = 0
    max_per_second: int = 0
    ordered: bool = False
    signature_scheme: str = ""
    public_key: str = ""
    previous_public_key: str = ""
    previous_secret_expires_at: str | None = None
    failing_since: str | None = None
    next_probe_at: str | None = None
    pause_reason: str = ""
    paused_until: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


@dataclasses.dataclass
class CreatedEndpoint:
    endpoint: Endpoint | None = None
    # The signing secret, shown on create only: store it for the receiver.
    secret: str = ""
    # True when the Idempotency-Key (request_id) had created it already.
    replayed: bool = False


@dataclasses.dataclass
class RotatedSecret:
    secret: str = ""
    public_key: str = ""
    previous_secret_expires_at: str | None = None


@dataclasses.dataclass
class Event:
    id: str = ""
    owner_id: str = ""
    type: str = ""
    subject: str = ""
    occurred_at: str | None = None
    data: dict[str, Any] | None = None


@dataclasses.dataclass
class PublishResult:
    event_id: str = ""
    # PUBLISH_OUTCOME_STORED, _DUPLICATE, _DROPPED_INTERNAL, _DROPPED_RAW, …
    outcome: str = ""
    reason: str = ""
    did_you_mean: str = ""
    occurred_at: str | None = None


@dataclasses.dataclass
class Delivery:
    id: str = ""
    endpoint_id: str = ""
    event_id: str = ""
    event_type: str = ""
    state: str = ""
    state_reason: str = ""
    wait_reason: str = ""
    attempt: int = 0
    max_attempts: int = 0
    probe: bool = False
    probes: int = 0
    last_error: str = ""
    link: str = ""
    created_at: str | None = None
    scheduled_at: str | None = None
    attempted_at: str | None = None
    finalized_at: str | None = None


@dataclasses.dataclass
class Attempt:
    id: str = ""
    delivery_id: str = ""
    attempt: int = 0
    probe: bool = False
    probes: int = 0
    outcome: str = ""
    http_status: int = 0
    error: str = ""
    response_body: str = ""
    duration: str | None = None
    started_at: str | None = None
    snooze_reason: str = ""
    snoozed_until: str | None = None


@dataclasses.dataclass
class EventWithDeliveries:
    event: Event | None = None
    deliveries: list[Delivery] = dataclasses.field(default_factory=list)
    # Why each of the owner's endpoints got the event or not.
    fanout: dict[str, Any] | None = None


@dataclasses.dataclass
class EventType:
    name: str = ""
    description: str = ""
    data_schema: dict[str, Any] | None = None
    data_example: dict[str, Any] | None = None


@dataclasses.dataclass
class EndpointStats:
    endpoint_id: str = ""
    last_hour: dict[str, Any] | None = None
    last_day: dict[str, Any] | None = None
    last_week: dict[str, Any] | None = None


@dataclasses.dataclass
class Redelivered:
    count: int = 0
    next_page_token: str = ""


@dataclasses.dataclass
class FilterTest:
    matched: bool = False
    applies: bool = False
    explanation: str = ""
    filter: dict[str, Any] | None = None
    event: Event | None = None


@dataclasses.dataclass
class PortalLink:
    # A one-time link: a credential, for its one user; do not log it.
    url: str = ""
    expires_at: str | None = None


@dataclasses.dataclass
class Page(typing.Generic[T]):
    items: list[T] = dataclasses.field(default_factory=list)
    # Pass as page_token for the next page; empty on the last.
    next_page_token: str = ""


class ProblemError(Exception):
    """An error answer: the API's RFC 9457 problem."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.code: str = str(problem.get("code", ""))
        self.detail: str = str(problem.get("detail", problem.get("title", "")))
        self.field_violations = [
            _load(FieldViolation, v) for v in problem.get("field_violations") or [] if isinstance(v, Mapping)
        ]
        super().__init__(f"{status} {self.code}: {self.detail}")


def _load(cls: type[T], value: Any) -> T:
    """Build dataclass cls from a JSON object, recursively; keys it does not know are left out."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{cls.__name__}: want a JSON object, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in value or value[f.name] is None:
            continue
        kwargs[f.name] = _convert(hints[f.name], value[f.name])
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(args[0], value) if len(args) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v) for v in value]
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _load(hint, value)
    return value


# --- the client ------------------------------------------------------------------


class Client:
    """One token's client of a dispatcher's HTTP/JSON API (the gRPC port).

    The publisher token publishes; the admin token makes every other call.
    timeout: seconds per call.
    """

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        url = self.base_url + path
        if query:
            pairs: list[tuple[str, str]] = []
            for k, v in query.items():
                if v is None:
                    continue
                for item in v if isinstance(v, (list, tuple)) else [v]:
                    pairs.append((k, "true" if item is True else "false" if item is False else str(item)))
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        data = None
        req_headers = {"Authorization": "Bearer " + self._token, "Accept": "application/json"}
        if body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
            req_headers["Content-Type"] = "application/json"
        req_headers.update(headers or {})
        req = urllib.request.Request(url, data=data, method=method, headers=req_headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                problem = json.loads(raw) if raw else {}
            except ValueError:
                problem = {"code": "UNKNOWN", "detail": raw.decode("utf-8", "replace")}
            raise ProblemError(e.code, problem if isinstance(problem, Mapping) else {}) from None
        return json.loads(raw) if raw else {}

    # --- EventService (publisher token) ---

    def publish(
        self,
        *,
        owner_id: str,
        type: str,
        subject: str,
        data: Mapping[str, Any] | None = None,
        id: str | None = None,
        occurred_at: str | None = None,
    ) -> PublishResult:
        """Publish one event. Without id or occurred_at the server assigns both (and answers them);
        a publisher that retries sends its own id (publishing is idempotent by it)."""
        event = {"owner_id": owner_id, "type": type, "subject": subject, "data": data, "id": id, "occurred_at": occurred_at}
        return _load(PublishResult, self._call("POST", "/v1/events:publish", body={"event": _compact(event)}))

    def publish_batch(self, events: Sequence[Mapping[str, Any]]) -> list[PublishResult]:
        """Publish up to 500 events (each as publish takes it), all or nothing."""
        resp = self._call("POST", "/v1/events:publishBatch", body={"events": [_compact(e) for e in events]})
        return [_load(PublishResult, r) for r in resp.get("results") or []]

    # --- EndpointService (admin token) ---

    def create_endpoint(
        self,
        *,
        owner_id: str,
        url: str,
        event_types: Sequence[str],
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> CreatedEndpoint:
        """Create an endpoint (fields: description, filter, labels, max_in_flight, …, as the API names them).
        idempotency_key (a UUID): a retry with the same key answers the first call's endpoint."""
        body = {"owner_id": owner_id, "url": url, "event_types": list(event_types), **fields}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return _load(CreatedEndpoint, self._call("POST", "/v1/endpoints", body=body, headers=headers))

    def get_endpoint(self, *, owner_id: str, endpoint_id: str) -> Endpoint:
        path = "/v1/endpoints/" + _seg(endpoint_id)
        return _load(Endpoint, self._call("GET", path, query={"owner_id": owner_id}).get("endpoint") or {})

    def list_endpoints(self, *, owner_id: str, page_size: int | None = None, page_token: str | None = None, **query: Any) -> Page[Endpoint]:
        resp = self._call("GET", "/v1/endpoints", query={"owner_id": owner_id, "page_size": page_size, "page_token": page_token, **query})
        return Page([_load(Endpoint, e) for e in resp.get("endpoints") or []], resp.get("next_page_token") or "")

    def iter_endpoints(self, *, owner_id: str, **query: Any) -> Iterator[Endpoint]:
        """Every endpoint of the owner, page by page."""
        return _pages(lambda token: self.list_endpoints(owner_id=owner_id, page_token=token, **query))

    def update_endpoint(self, *, owner_id: str, endpoint_id: str, update_mask: Sequence[str], **fields: Any) -> Endpoint:
        """Change the fields update_mask names (e.g. ["description", "event_types"]) to the values given."""
        body = {"owner_id": owner_id, "update_mask": ",".join(update_mask), **fields}
        path = "/v1/endpoints/" + _seg(endpoint_id)
        return _load(Endpoint, self._call("PATCH", path, body=body).get("endpoint") or {})

    def delete_endpoint(self, *, owner_id: str, endpoint_id: str) -> None:
        self._call("DELETE", "/v1/endpoints/" + _seg(endpoint_id), query={"owner_id": owner_id})

    def rotate_secret(self, *, owner_id: str, endpoint_id: str, grace_period: str | None = None) -> RotatedSecret:
        """A new secret; the previous one keeps signing for grace_period ("24h" when unset)."""
        path = "/v1/endpoints/" + _seg(endpoint_id) + ":rotateSecret"
        return _load(RotatedSecret, self._call("POST", path, body={"owner_id": owner_id, "grace_period": grace_period}))

    def send_test(self, *, owner_id: str, endpoint_id: str) -> str:
        """Publish one webhook.test event to this endpoint only; its event id."""
        path = "/v1/endpoints/" + _seg(endpoint_id) + ":sendTest"
        return str(self._call("POST", path, body={"owner_id": owner_id}).get("event_id", ""))

    def list_deliveries(self, *, owner_id: str, endpoint_id: str, page_token: str | None = None, **query: Any) -> Page[Delivery]:
        """One page of an endpoint's deliveries, newest first (query: states, event_type, page_size, …)."""
        path = "/v1/endpoints/" + _seg(endpoint_id) + "/deliveries"
        resp = self._call("GET", path, query={"owner_id": owner_id, "page_token": page_token, **query})
        return Page([_load(Delivery, d) for d in resp.get("deliveries") or []], resp.get("next_page_token") or "")

    def iter_deliveries(self, *, owner_id: str, endpoint_id: str, **query: Any) -> Iterator[Delivery]:
        return _pages(lambda token: self.list_deliveries(owner_id=owner_id, endpoint_id=endpoint_id, page_token=token, **query))

    def get_delivery(self, *, owner_id: str, delivery_id: str) -> Delivery:
        resp = self._call("GET", "/v1/deliveries/" + _seg(delivery_id), query={"owner_id": owner_id})
        return _load(Delivery, resp.get("delivery") or {})

    def retry_delivery(self, *, owner_id: str, delivery_id: str, resend: bool = False) -> Delivery:
        """Run one waiting delivery now; FAILED_PRECONDITION for a finished one (redeliver re-queues those).

        With resend=True a DELIVERED one is sent again (same webhook-id); one already on its way is
        returned as it is, so a repeated call does not send it twice.
        """
        body: dict[str, Any] = {"owner_id": owner_id}
        if resend:
            body["resend"] = True
        resp = self._call("POST", "/v1/deliveries/" + _seg(delivery_id) + ":retry", body=body)
        return _load(Delivery, resp.get("delivery") or {})

    def redeliver(self, *, owner_id: str, endpoint_id: str, **fields: Any) -> Redelivered:
        """Re-queue one batch of an endpoint's FAILED or CANCELLED deliveries (fields: since, limit, page_token)."""
        path = "/v1/endpoints/" + _seg(endpoint_id) + ":redeliver"
        return _load(Redelivered, self._call("POST", path, body={"owner_id": owner_id, **fields}))

    def list_attempts(self, *, owner_id: str, delivery_id: str, page_token: str | None = None, **query: Any) -> Page[Attempt]:
        path = "/v1/deliveries/" + _seg(delivery_id) + "/attempts"
        resp = self._call("GET", path, query={"owner_id": owner_id, "page_token": page_token, **query})
        return Page([_load(Attempt, a) for a in resp.get("attempts") or []], resp.get("next_page_token") or "")

    def list_events(self, *, owner_id: str, page_token: str | None = None, **query: Any) -> Page[Event]:
        """One page of the owner's stored events, newest first (query: event_type, subject_prefix, since, until, …)."""
        resp = self._call("GET", "/v1/events", query={"owner_id": owner_id, "page_token": page_token, **query})
        return Page([_load(Event, e) for e in resp.get("events") or []], resp.get("next_page_token") or "")

    def iter_events(self, *, owner_id: str, **query: Any) -> Iterator[Event]:
        return _pages(lambda token: self.list_events(owner_id=owner_id, page_token=token, **query))

    def get_event(self, *, owner_id: str, event_id: str) -> EventWithDeliveries:
        resp = self._call("GET", "/v1/events/" + _seg(event_id), query={"owner_id": owner_id})
        return _load(EventWithDeliveries, resp)

    def list_event_types(self) -> list[EventType]:
        """The dispatcher's webhook types, with their data schema and example."""
        return [_load(EventType, t) for t in self._call("GET", "/v1/event-types").get("event_types") or []]

    def get_endpoint_stats(self, *, owner_id: str, endpoint_ids: Sequence[str] | None = None) -> list[EndpointStats]:
        resp = self._call("GET", "/v1/endpoint-stats", query={"owner_id": owner_id, "endpoint_ids": list(endpoint_ids or [])})
        return [_load(EndpointStats, s) for s in resp.get("stats") or []]

    def test_filter(self, *, owner_id: str, **fields: Any) -> FilterTest:
        """Evaluate a filter (filter or endpoint_id) against a stored event (event_id) or a sample, delivering nothing."""
        return _load(FilterTest, self._call("POST", "/v1/filters:test", body={"owner_id": owner_id, **fields}))

    def create_portal_session(self, *, owner_id: str, **fields: Any) -> PortalLink:
        """A one-time link into the owners' portal (fields: access "PORTAL_ACCESS_READ"/"_MANAGE", ttl "1h", …)."""
        return _load(PortalLink, self._call("POST", "/v1/portal-sessions", body={"owner_id": owner_id, **fields}))


def _compact(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if v is not None}


def _seg(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")


def _pages(page: Any) -> Iterator[Any]:
    token: str | None = None
    while True:
        p = page(token)
        yield from p.items
        if not p.next_page_token:
            return
        token = p.next_page_token
