"""`alarmtop serve --lambda-api PORT`: the AWS Lambda API's durable-execution routes
over HTTP, for boto3's Lambda client and for handlers in other processes (the
SDK's own client, given `AWS_ENDPOINT_URL_LAMBDA`).

Every request is SigV4-verified (`sigv4`) against the server's key pair
(`lambda_keys`), for the runtime's region and the service `lambda`, before
anything else is read: a request with a wrong signature, an unknown key or a
stale date changes nothing and gets AWS's error (403). Refusals are logged once
per client per `REFUSAL_LOG_WINDOW_S`, with how many more there were, so a client
that keeps sending a bad key writes a line a minute, not one per request. Then
the route (`lambda_routes`) calls `runtime.lambda_api`.

Like the ops server it binds 127.0.0.1 unless told otherwise, and refuses to
serve beyond this machine without TLS unless told that too; its connections are
in the runtime's descriptor budget.
"""

from __future__ import annotations

import collections
import logging
import ssl
import time
from collections.abc import Callable

from alarmtop.core import Runtime
from alarmtop.server import lambda_routes, sigv4
from alarmtop.server.guard import check_bind
from alarmtop.server.http11 import HttpLimits, HttpRequest, HttpResponse, HttpServer
from alarmtop.server.lambda_keys import LambdaKeys

log = logging.getLogger("alarmtop.server.lambda")
SERVICE = "lambda"
REFUSAL_LOG_WINDOW_S = 60.0
_HTTP_CODES = {400: "InvalidRequestContentException", 408: "RequestTimeoutException",
               413: "RequestTooLargeException", 431: "RequestHeaderFieldsTooLargeException",
               500: "ServiceException", 501: "UnsupportedTransferEncodingException",
               505: "HttpVersionNotSupportedException"}


class RefusalLog:
    """When to log a client's refused requests: the first of a window at once, the
    rest counted and said with the first of the next window (pure; `now` injected)."""

    def __init__(self, window_s: float = REFUSAL_LOG_WINDOW_S,
                 now: Callable[[], float] = time.monotonic, max_clients: int = 10_000) -> None:
        self.window_s, self._now, self.max_clients = window_s, now, max_clients
        self._clients: collections.OrderedDict[str, tuple[float, int]] = \
            collections.OrderedDict()

    def note(self, client: str) -> int | None:
        """Count one refusal of `client`; the number of its refusals left unsaid since
        its last line when a line is due now, else None."""
        now = self._now()
        seen = self._clients.pop(client, None)
        if seen is not None and now - seen[0] < self.window_s:
            self._clients[client] = (seen[0], seen[1] + 1)
            return None
        self._clients[client] = (now, 0)
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        return 0 if seen is None else seen[1]


def http_refusal(status: int, message: str) -> HttpResponse:
    """A request HTTP/1.1 itself refuses (malformed, too large, too slow)."""
    return lambda_routes.error_response(_HTTP_CODES.get(status, "InvalidRequestContentException"),
                                        status, message)


class LambdaApiServer:
    """The Lambda API on `host:port` (port 0: any free one, then `self.port`).

    `keys`: the key pair requests are signed with; `region`: the region they are
    signed for (default: the runtime's, `AwsOptions.place`); `wait_s`: how long a
    RequestResponse Invoke waits for the execution's end (default: the runtime's
    invocation timeout, Lambda's 15 minutes); `now`: the wall clock signatures are
    dated by."""

    def __init__(self, runtime: Runtime, keys: LambdaKeys, host: str = "127.0.0.1",
                 port: int = 0, *, ssl_context: ssl.SSLContext | None = None,
                 insecure_no_tls: bool = False, limits: HttpLimits | None = None,
                 region: str | None = None, wait_s: float | None = None,
                 now: Callable[[], float] = time.time) -> None:
        check_bind(host, ssl_context is not None, insecure_no_tls, "--lambda-api-host")
        self.api = runtime.lambda_api
        self.keys = keys
        self.region = region or runtime.aws.place.region
        self.wait_s = wait_s if wait_s is not None else runtime.aws.invocation_timeout_s
        self._now = now
        self.refusals = RefusalLog()
        self.http = HttpServer(self._handle, http_refusal, host, port, ssl_context=ssl_context,
                               limits=limits)
        self._tls = ssl_context is not None
        runtime.reserve_descriptors("the Lambda API's sockets",
                                    self.http.limits.max_connections + 4)

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        """What `AWS_ENDPOINT_URL_LAMBDA` (or boto3's `endpoint_url`) is set to."""
        host = self.http.host
        shown = f"[{host}]" if ":" in host else host
        return f"{'https' if self._tls else 'http'}://{shown}:{self.port}"

    @property
    def abandoned(self) -> int:
        return self.http.abandoned

    async def bind(self) -> None:
        await self.http.bind()

    async def start(self) -> None:
        await self.http.start()

    async def stop(self, grace_s: float | None = 1.0) -> None:
        await self.http.stop(grace_s)

    async def _handle(self, req: HttpRequest) -> HttpResponse:
        signed = sigv4.SignedRequest(req.method, req.path, req.query, req.headers, req.body)
        try:
            sigv4.verify(signed, self.keys.secret_of, self.region, SERVICE, self._now())
        except sigv4.SigV4Refusal as exc:
            self._refused(req, exc)
            return lambda_routes.error_response(exc.code, exc.status, exc.message)
        return await lambda_routes.answer(self.api, req.method, req.path, req.query,
                                          req.headers, req.body, self.wait_s)

    def _refused(self, req: HttpRequest, exc: sigv4.SigV4Refusal) -> None:
        more = self.refusals.note(req.peer)
        if more is None:
            return
        also = f" ({more} more refused from it since the last line)" if more else ""
        log.warning("Lambda API: refused %s %s from %s: %s: %s%s; nothing was changed",
                    req.method, req.path[:120], req.peer, exc.code, exc.message, also)
