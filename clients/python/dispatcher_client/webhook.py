"""Verifying deliveries on the receiving side (Standard Webhooks), standard library only.

    from dispatcher_client import Webhook, WebhookVerificationError

    wh = Webhook(secret)              # the endpoint's whsec_… (v1) or whpk_…/whsk_… (v1a)
    try:
        payload = wh.verify(body, request_headers)   # body: the raw bytes received
    except WebhookVerificationError:
        ...                           # answer 400 and do nothing

It checks the webhook-signature header's entries of the secret's scheme (v1:
HMAC-SHA256; v1a: Ed25519) over "<webhook-id>.<webhook-timestamp>.<body>", and
that webhook-timestamp is within the tolerance (300 s) of now; it returns the
payload parsed as JSON. The official standardwebhooks libraries do the same;
this one needs nothing installed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from . import _ed25519

DEFAULT_TOLERANCE = 300


class WebhookVerificationError(Exception):
    """The delivery does not verify: a header is missing or malformed, it is too old or too new, or no signature matches."""


def _b64decode(text: str) -> bytes:
    # Secrets are sometimes written without their padding.
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


class Webhook:
    """A verifier for one endpoint's secret.

    whsec_<base64> (or the bare base64): the v1 HMAC-SHA256 key. whpk_<base64>:
    a v1a Ed25519 public key (what a receiver holds). whsk_<base64>: a v1a
    private key (32-byte seed, or 64-byte seed and public key), whose public
    key verifies.
    """

    def __init__(self, secret: str) -> None:
        try:
            if secret.startswith("whpk_"):
                self._scheme, self._key = "v1a", _b64decode(secret[len("whpk_") :])
                if len(self._key) != 32:
                    raise ValueError("an Ed25519 public key is 32 bytes")
            elif secret.startswith("whsk_"):
                raw = _b64decode(secret[len("whsk_") :])
                if len(raw) not in (32, 64):
                    raise ValueError("an Ed25519 private key is 32 bytes (or 64: the seed, then the public key)")
                self._scheme, self._key = "v1a", _ed25519.public_key(raw[:32])
            else:
                self._scheme, self._key = "v1", _b64decode(secret.removeprefix("whsec_"))
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"invalid webhook secret: {e}") from e

    def verify(
        self,
        payload: bytes | str,
        headers: Mapping[str, str],
        *,
        now: float | None = None,
        tolerance: int | None = DEFAULT_TOLERANCE,
    ) -> Any:
        """Verify one delivery and return its payload parsed as JSON.

        headers: the request's headers (any case). now: the Unix time to check
        webhook-timestamp against (default: the clock). tolerance: seconds
        webhook-timestamp may be off by either way; None skips the check.
        Raises WebhookVerificationError.
        """
        body = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        self.verify_signature(body, headers, now=now, tolerance=tolerance)
        try:
            return json.loads(body)
        except ValueError as e:
            raise WebhookVerificationError(f"the payload is not JSON: {e}") from e

    def verify_signature(
        self,
        body: bytes,
        headers: Mapping[str, str],
        *,
        now: float | None = None,
        tolerance: int | None = DEFAULT_TOLERANCE,
    ) -> None:
        """Verify one delivery's signature and time, without parsing its body."""
        lower = {k.lower(): v for k, v in headers.items()}
        msg_id, ts_text, signatures = (lower.get(h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
        if not msg_id or not ts_text or not signatures:
            raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header")
        try:
            ts = int(ts_text)
        except ValueError:
            raise WebhookVerificationError(f"invalid webhook-timestamp {ts_text!r}") from None
        if tolerance is not None:
            current = int(time.time() if now is None else now)
            if current - ts > tolerance:
                raise WebhookVerificationError("message timestamp too old")
            if ts > current + tolerance:
                raise WebhookVerificationError("message timestamp too new")
        signed = f"{msg_id}.{ts}.".encode() + body
        for entry in str(signatures).split(" "):
            version, sep, value = entry.partition(",")
            if not sep or version != self._scheme:
                continue
            if self._scheme == "v1":
                expected = base64.b64encode(hmac.new(self._key, signed, hashlib.sha256).digest()).decode()
                if hmac.compare_digest(expected.encode(), value.encode()):
                    return
            else:
                try:
                    sig = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    continue
                if _ed25519.verify(self._key, signed, sig):
                    return
        raise WebhookVerificationError("no matching signature found")
