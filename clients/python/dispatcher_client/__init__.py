"""A Python client of the dispatcher's HTTP/JSON API, and a verifier of its deliveries.

Standard library only: nothing to install from a package index. See README.md.
"""

from .client import (
    Attempt,
    Client,
    CreatedEndpoint,
    Delivery,
    Endpoint,
    EndpointStats,
    Event,
    EventType,
    EventWithDeliveries,
    FieldViolation,
    FilterTest,
    Page,
    PortalLink,
    ProblemError,
    PublishResult,
    Redelivered,
    RotatedSecret,
)
from .webhook import Webhook, WebhookVerificationError

__all__ = [
    "Attempt",
    "Client",
    "CreatedEndpoint",
    "Delivery",
    "Endpoint",
    "EndpointStats",
    "Event",
    "EventType",
    "EventWithDeliveries",
    "FieldViolation",
    "FilterTest",
    "Page",
    "PortalLink",
    "ProblemError",
    "PublishResult",
    "Redelivered",
    "RotatedSecret",
    "Webhook",
    "WebhookVerificationError",
]

__version__ = "0.0.0"
