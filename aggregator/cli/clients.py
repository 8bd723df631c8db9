"""AWS clients for the commands: :func:`make_client` with retries and timeouts, a quick probe
of a loopback endpoint (a stopped DynamoDB Local), and each client's region and endpoint noted
in the click context for error messages.

Commands call it as ``clients.make_client(...)``, so replacing
``aggregator.cli.clients.make_client`` (as tests do) reaches every command.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload
from urllib.parse import urlsplit

import click
from botocore.exceptions import EndpointConnectionError, NoRegionError

from aggregator.core.exceptions import ConfigError
from aggregator.core.text import quote

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_events import EventBridgeClient

DEFAULT_MAX_ATTEMPTS = 10
"""Retries of a throttled or failed request (botocore "standard" mode) after the first attempt;
``AWS_MAX_ATTEMPTS`` (total attempts) overrides it."""
CONNECT_TIMEOUT_SECONDS = 5
"""Seconds to wait for a TCP connection to the endpoint (botocore's default is 60)."""


SERVICE_NAMES: dict[str, str] = {
    "dynamodb": "DynamoDB",
    "dynamodbstreams": "DynamoDB Streams",
    "events": "EventBridge",
}
"""Each service :func:`make_client` makes clients of, as messages name it. A client that cannot
be made (no region, a loopback endpoint nothing listens on) raises botocore's error with the
service in its ``kwargs["service_name"]``, so the error line names the service whose client
failed (:func:`aggregator.cli.boundary.describe_error`)."""


META_CLIENTS = "aggregator.clients"
"""Key of the click context's ``meta`` holding each client's region and endpoint, by service."""


class _Retries(TypedDict, total=False):
    """botocore's ``Config(retries=...)``."""

    mode: Literal["legacy", "standard", "adaptive"]
    max_attempts: int
    total_max_attempts: int


def _retries() -> _Retries:
    """botocore's retry settings: ``AWS_MAX_ATTEMPTS`` (total attempts, the first included, as
    the AWS SDKs read it) when set, else :data:`DEFAULT_MAX_ATTEMPTS` retries."""
    value = os.environ.get("AWS_MAX_ATTEMPTS", "").strip()
    if not value:
        return {"mode": "standard", "max_attempts": DEFAULT_MAX_ATTEMPTS}
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"AWS_MAX_ATTEMPTS must be a whole number of at least 1, got {quote(value)}"
        )
    return {"mode": "standard", "total_max_attempts": int(value)}


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_local_endpoint(endpoint_url: str, service: str) -> None:
    """Fail at once when ``endpoint_url`` is a loopback address nothing listens on (a stopped
    DynamoDB Local) instead of after every retry; other hosts are left to botocore. The error
    names ``service`` (``kwargs["service_name"]``)."""
    parts = urlsplit(endpoint_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # botocore reports the malformed URL
    if parts.hostname is None or not is_loopback(parts.hostname):
        return
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except OSError as exc:
        raise EndpointConnectionError(
            endpoint_url=endpoint_url, error=exc, service_name=service
        ) from exc


def _remember_client(service: str, client: BaseClient) -> None:
    """Note the client's region and endpoint in the click context, for error messages."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(META_CLIENTS, {})[service] = (
            client.meta.region_name,
            client.meta.endpoint_url,
        )


@overload
def make_client(
    service: Literal["dynamodb"], endpoint_url: str | None, region: str | None = None
) -> DynamoDBClient: ...


@overload
def make_client(
    service: Literal["dynamodbstreams"], endpoint_url: str | None, region: str | None = None
) -> DynamoDBStreamsClient: ...


@overload
def make_client(
    service: Literal["events"], endpoint_url: str | None, region: str | None = None
) -> EventBridgeClient: ...


def make_client(
    service: Literal["dynamodb", "dynamodbstreams", "events"],
    endpoint_url: str | None,
    region: str | None = None,
) -> DynamoDBClient | DynamoDBStreamsClient | EventBridgeClient:
    """A boto3 client; with an ``endpoint_url`` (DynamoDB Local) dummy credentials are used
    when none are configured, and the region defaults to ``us-east-1``.

    Failed requests are retried 10 times in botocore's "standard" mode (or tried
    ``AWS_MAX_ATTEMPTS`` times in all, when set); a connection must open within 5 s. A loopback
    ``endpoint_url`` is probed with one TCP connect first, so a stopped DynamoDB Local is
    reported at once rather than after the retries.

    Raises
    ------
    botocore.exceptions.NoRegionError
        Without ``endpoint_url`` when neither ``region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``
        nor the AWS config profile names a region; ``kwargs["service_name"]`` is ``service``.
    botocore.exceptions.EndpointConnectionError
        When ``endpoint_url`` is a loopback address nothing listens on;
        ``kwargs["service_name"]`` is ``service``.
    ConfigError
        When ``AWS_MAX_ATTEMPTS`` is not a whole number of at least 1.
    ValueError
        When ``endpoint_url`` is not a URL (botocore's "Invalid endpoint").
    """
    import boto3
    from botocore.config import Config

    kwargs: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "region_name": region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION"),
        "config": Config(
            retries=_retries(),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            max_pool_connections=32,
        ),
    }
    if endpoint_url:
        _check_local_endpoint(endpoint_url, service)
        kwargs["region_name"] = kwargs["region_name"] or "us-east-1"
        session = boto3.session.Session()
        if session.get_credentials() is None:
            kwargs.update(aws_access_key_id="local", aws_secret_access_key="local")
    try:
        if service == "events":  # threshold events (run --event-bus): not a DynamoDB client
            return boto3.client("events", **kwargs)
        client: DynamoDBClient | DynamoDBStreamsClient
        if service == "dynamodb":
            client = boto3.client("dynamodb", **kwargs)
        elif service == "dynamodbstreams":
            client = boto3.client("dynamodbstreams", **kwargs)
        else:  # the overloads name the services; anything else is a programming error
            raise ValueError(f"make_client: no client for service {service!r}")
    except NoRegionError as exc:
        raise NoRegionError(service_name=service) from exc
    _remember_client(service, client)
    return client
