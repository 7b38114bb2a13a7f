"""AWS Signature Version 4, checked on the service side (pure: no sockets, no clock).

The Lambda API (`lambda_http`) lets a request through only when its
`Authorization` header is a SigV4 signature (AWS4-HMAC-SHA256) made with a key the
server knows, for its region and service (`lambda`), at most `MAX_SKEW_S` (5
minutes) from now, over the request as it arrived: its method, path, query, the
headers it says it signed (`host` and `x-amz-date` among them) and the SHA-256 of
its body. `verify` answers with the access key id, or raises `SigV4Refusal` with
the error AWS answers (code, HTTP status, message), so boto3 reads it as AWS's.

The canonical request is AWS's (Signature Version 4 signing process): the path
normalised (no empty or dot segments) and URI-encoded once more, as every service
but S3 signs it; the query's names and values decoded, encoded again by RFC 3986
and sorted; header values trimmed, inner runs of spaces made one, repeated headers
joined with commas.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
MAX_SKEW_S = 300.0  # AWS's: a signature dated more than 5 minutes away is refused
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_SPACES = re.compile(r"\s+")
_AUTH_PART = re.compile(r"\s*([A-Za-z]+)=([^,\s]*)\s*")
_MISMATCH = ("The request signature we calculated does not match the signature you "
             "provided. Check your AWS Secret Access Key and signing method. Consult the "
             "service documentation for details.")
_UNKNOWN_KEY = "The security token included in the request is invalid."


class SigV4Refusal(Exception):
    """A request the signature check refuses: `code`, `status` and `message` as AWS
    answers them."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.status, self.message = code, status, message


def _invalid(message: str) -> SigV4Refusal:
    return SigV4Refusal("InvalidSignatureException", 403, message)


def _incomplete(message: str) -> SigV4Refusal:
    return SigV4Refusal("IncompleteSignatureException", 400, message)


@dataclass(frozen=True)
class SignedRequest:
    """A request as it arrived: the path and query as sent (still percent-encoded),
    the headers in their order (names in any case, repeats kept), the body."""

    method: str
    path: str
    query: str
    headers: Sequence[tuple[str, str]]
    body: bytes = b""

    def header_values(self, name: str) -> list[str]:
        lower = name.lower()
        return [v for k, v in self.headers if k.lower() == lower]

    def header(self, name: str) -> str | None:
        values = self.header_values(name)
        return values[0] if values else None


@dataclass(frozen=True)
class Authorization:
    """The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header."""

    access_key_id: str
    date: str  # the scope's YYYYMMDD
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{self.terminator}"


def parse_authorization(value: str | None) -> Authorization:
    """The parts of an Authorization header; `SigV4Refusal` when there is none or it
    is not a SigV4 one."""
    if value is None or not value.strip():
        raise SigV4Refusal("MissingAuthenticationTokenException", 403,
                           "Missing Authentication Token")
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _incomplete(f"Unsupported AWS 'algorithm': {algorithm[:40]!r} (the Lambda API "
                          f"takes {ALGORITHM})")
    parts: dict[str, str] = {}
    for piece in rest.split(","):
        m = _AUTH_PART.fullmatch(piece)
        if m is None or m.group(1) in parts:
            raise _incomplete("Authorization header is not 'Credential=..., SignedHeaders=..., "
                              "Signature=...'")
        parts[m.group(1)] = m.group(2)
    missing = [k for k in ("Credential", "SignedHeaders", "Signature") if not parts.get(k)]
    if missing:
        raise _incomplete(f"Authorization header requires '{missing[0]}' parameter.")
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or not all(scope):
        raise _incomplete("Credential is not 'ACCESS_KEY_ID/YYYYMMDD/REGION/SERVICE/"
                          "aws4_request'")
    signed = tuple(parts["SignedHeaders"].split(";"))
    if any(not h or h != h.lower() for h in signed):
        raise _incomplete("SignedHeaders is a ';'-separated list of lower-case names")
    return Authorization(scope[0], scope[1], scope[2], scope[3], scope[4], signed,
                         parts["Signature"])


def normalise_path(path: str) -> str:
    """RFC 3986's removal of dot segments, and of empty ones, as AWS signs paths."""
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if out:
                out.pop()
            continue
        out.append(segment)
    tail = "/" if path.endswith("/") and out else ""
    return ("/" if path.startswith("/") else "") + "/".join(out) + tail


def canonical_uri(path: str) -> str:
    """The path as sent, normalised, URI-encoded once more (every service but S3)."""
    return quote(normalise_path(path), safe="/~")


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(query: str) -> str:
    """Names and values decoded, encoded by RFC 3986, sorted by name then value."""
    pairs = []
    for piece in query.split("&") if query else []:
        if not piece:
            continue
        name, _, value = piece.partition("=")
        pairs.append((_encode(unquote(name)), _encode(unquote(value))))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_value(value: str) -> str:
    return _SPACES.sub(" ", value.strip())


def canonical_request(req: SignedRequest, signed: Sequence[str], payload_hash: str) -> str:
    headers = "".join(f"{name}:{','.join(canonical_value(v) for v in req.header_values(name))}\n"
                      for name in signed)
    return "\n".join([req.method, canonical_uri(req.path), canonical_query(req.query),
                      headers, ";".join(signed), payload_hash])


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join([ALGORITHM, amz_date, scope,
                      hashlib.sha256(canonical.encode("utf-8")).hexdigest()])


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = _hmac(("AWS4" + secret).encode("utf-8"), date)
    for part in (region, service, TERMINATOR):
        key = _hmac(key, part)
    return key


def signature(secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    key = signing_key(secret, auth.date, auth.region, auth.service)
    return hmac.new(key, string_to_sign(amz_date, auth.scope, canonical).encode("utf-8"),
                    hashlib.sha256).hexdigest()


def _request_time(amz_date: str | None) -> datetime:
    if amz_date is None:
        raise _incomplete("Authorization header requires existence of a 'X-Amz-Date' header.")
    try:
        return datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        raise _incomplete(f"X-Amz-Date {amz_date[:40]!r} is not YYYYMMDD'T'HHMMSS'Z'") from None


def _check_time(amz_date: str, when: datetime, now_s: float, skew_s: float) -> None:
    now = datetime.fromtimestamp(now_s, UTC)
    edge = skew_s / 60
    if when.timestamp() < now_s - skew_s:
        earliest = datetime.fromtimestamp(now_s - skew_s, UTC).strftime(_AMZ_DATE)
        raise _invalid(f"Signature expired: {amz_date} is now earlier than {earliest} "
                       f"({now.strftime(_AMZ_DATE)} - {edge:g} min.)")
    if when.timestamp() > now_s + skew_s:
        latest = datetime.fromtimestamp(now_s + skew_s, UTC).strftime(_AMZ_DATE)
        raise _invalid(f"Signature not yet current: {amz_date} is still later than {latest} "
                       f"({now.strftime(_AMZ_DATE)} + {edge:g} min.)")


def verify(req: SignedRequest, secret_of: Callable[[str], str | None], region: str,
           service: str, now_s: float, *, skew_s: float = MAX_SKEW_S) -> str:
    """The access key id that signed `req`; `SigV4Refusal` (AWS's error) otherwise.

    `secret_of(access_key_id)` is the key's secret, None for a key the server does not
    know; `now_s` is the wall clock (epoch seconds)."""
    auth = parse_authorization(req.header("authorization"))
    if req.header("x-amz-security-token") is not None:
        raise SigV4Refusal("UnrecognizedClientException", 403, _UNKNOWN_KEY)
    secret = secret_of(auth.access_key_id)
    if secret is None:
        raise SigV4Refusal("UnrecognizedClientException", 403, _UNKNOWN_KEY)
    if "host" not in auth.signed_headers:
        raise _incomplete("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    amz_date = req.header("x-amz-date")
    when = _request_time(amz_date)
    assert amz_date is not None
    if "x-amz-date" not in auth.signed_headers:
        raise _incomplete("'X-Amz-Date' must be a 'SignedHeader' in the AWS Authorization.")
    if auth.date != amz_date[:8]:
        raise _invalid(f"Date in Credential scope does not match YYYYMMDD from ISO-8601 "
                       f"version of date from HTTP: '{auth.date[:8]}' != '{amz_date[:8]}', "
                       f"from '{amz_date}'.")
    if auth.region != region:
        raise _invalid(f"Credential should be scoped to a valid region, not "
                       f"'{auth.region[:40]}' (this service: '{region}').")
    if auth.service != service:
        raise _invalid(f"Credential should be scoped to correct service: '{service}'.")
    if auth.terminator != TERMINATOR:
        raise _invalid(f"Credential should be scoped with a valid terminator: '{TERMINATOR}', "
                       f"not '{auth.terminator[:40]}'.")
    _check_time(amz_date, when, now_s, skew_s)
    body_hash = hashlib.sha256(req.body).hexdigest() if req.body else EMPTY_SHA256
    claimed = req.header("x-amz-content-sha256")
    if claimed is not None and claimed != body_hash:  # UNSIGNED-PAYLOAD included
        raise _invalid("The provided 'x-amz-content-sha256' header does not match what was "
                       "computed.")
    if any(not req.header_values(h) for h in auth.signed_headers):
        raise _invalid(_MISMATCH)
    expected = signature(secret, auth, amz_date, canonical_request(req, auth.signed_headers,
                                                                   body_hash))
    if not hmac.compare_digest(expected.encode(), auth.signature.encode("utf-8", "replace")):
        raise _invalid(_MISMATCH)
    return auth.access_key_id
