"""The SigV4 check (`server/sigv4.py`), pure: AWS's published Signature Version 4 test
vectors, every request botocore's own signer signs (seeded variety), and each
refusal with AWS's code; and the refusal log's windows."""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime
from urllib.parse import quote, urlencode, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from alarmtop.server import sigv4
from alarmtop.server.lambda_http import RefusalLog

# AWS's Signature Version 4 test suite: its key, time, region and service.
SUITE_KEY, SUITE_SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SUITE_DATE = "20150830T123600Z"
SUITE_NOW = datetime(2015, 8, 30, 12, 36, tzinfo=UTC).timestamp()
SUITE_HEADERS = [("Host", "example.amazonaws.com"), ("X-Amz-Date", SUITE_DATE)]
KEY, SECRET = "AKIAALARMTOPTESTKEY1", "alarmtop-test-secret-0123456789abcdefABCD"


def secrets_of(key: str, secret: str):  # type: ignore[no-untyped-def]
    return lambda asked: secret if asked == key else None


def suite_request(method: str, path: str, query: str, signature: str,
                  headers: list[tuple[str, str]] | None = None,
                  body: bytes = b"") -> sigv4.SignedRequest:
    headers = [*(headers or []), *SUITE_HEADERS]
    signed = ";".join(sorted(k.lower() for k, _ in headers))
    auth = (f"AWS4-HMAC-SHA256 Credential={SUITE_KEY}/20150830/us-east-1/service/aws4_request, "
            f"SignedHeaders={signed}, Signature={signature}")
    return sigv4.SignedRequest(method, path, query, [*headers, ("Authorization", auth)], body)


@pytest.mark.parametrize(("name", "method", "path", "query", "signature"), [
    ("get-vanilla", "GET", "/", "",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-query-order-key-case", "GET", "/", "Param2=value2&Param1=value1",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-utf8", "GET", "/ሴ", "",
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
    ("get-space", "GET", "/example space/", "",
     "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
    ("get-relative", "GET", "/example/..", "",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-slash-pointless-dot", "GET", "/./example", "",
     "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5"),
    ("post-vanilla", "POST", "/", "",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-vanilla-query", "POST", "/", "Param1=value1",
     "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
])
def test_aws_signature_v4_test_suite(name: str, method: str, path: str, query: str,
                                     signature: str) -> None:
    req = suite_request(method, path, query, signature)
    assert sigv4.verify(req, secrets_of(SUITE_KEY, SUITE_SECRET), "us-east-1", "service",
                        SUITE_NOW) == SUITE_KEY
    tampered = suite_request(method, path, query + "&x=1" if query else "x=1", signature)
    with pytest.raises(sigv4.SigV4Refusal, match="does not match"):
        sigv4.verify(tampered, secrets_of(SUITE_KEY, SUITE_SECRET), "us-east-1", "service",
                     SUITE_NOW)


def test_the_suites_signed_form_body() -> None:
    """post-x-www-form-urlencoded: a signed Content-Type, the body's hash."""
    req = suite_request("POST", "/", "",
                        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
                        [("Content-Type", "application/x-www-form-urlencoded")],
                        b"Param1=value1")
    assert sigv4.verify(req, secrets_of(SUITE_KEY, SUITE_SECRET), "us-east-1", "service",
                        SUITE_NOW) == SUITE_KEY
    changed = sigv4.SignedRequest(req.method, req.path, req.query, req.headers, b"Param1=value2")
    with pytest.raises(sigv4.SigV4Refusal, match="does not match"):
        sigv4.verify(changed, secrets_of(SUITE_KEY, SUITE_SECRET), "us-east-1", "service",
                     SUITE_NOW)


def botocore_signed(method: str, url: str, headers: dict[str, str], body: bytes,
                    key: str = KEY, secret: str = SECRET,
                    region: str = "us-east-1") -> tuple[sigv4.SignedRequest, float]:
    """What the wire carries of a request botocore's own SigV4 signer signed, and when."""
    req = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    SigV4Auth(Credentials(key, secret), "lambda", region).add_auth(req)
    prepared = req.prepare()
    parts = urlsplit(prepared.url)
    wire = [("Host", parts.netloc), *prepared.headers.items()]
    when = datetime.strptime(prepared.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=UTC).timestamp()
    return sigv4.SignedRequest(method, parts.path, parts.query, wire, body), when


def random_text(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ019-_.~ !$&'()*+,;=:@/%?#[]é€ሴ\u00a0"
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_every_request_botocores_signer_signs_is_verified() -> None:
    rng = random.Random(26)
    for i in range(300):
        segments = [quote(random_text(rng, rng.randint(1, 12)), safe="~")
                    for _ in range(rng.randint(1, 4))]
        pairs = [(random_text(rng, rng.randint(1, 6)), random_text(rng, rng.randint(0, 8)))
                 for _ in range(rng.randint(0, 4))]
        if pairs and rng.random() < 0.3:
            pairs.append((pairs[0][0], random_text(rng, 3)))  # a repeated name
        query = urlencode(pairs, quote_via=quote, safe="-_.~")
        url = f"http://127.0.0.1:{rng.randint(1, 65535)}/{'/'.join(segments)}" + (
            f"?{query}" if query else "")
        headers = {"X-Amz-Invocation-Type": rng.choice(["Event", "RequestResponse"]),
                   "X-Custom": "  spaced   out  value "}
        body = random_text(rng, rng.randint(0, 40)).encode()
        method = rng.choice(["GET", "POST", "DELETE"])
        req, when = botocore_signed(method, url, headers, body)
        assert sigv4.verify(req, secrets_of(KEY, SECRET), "us-east-1", "lambda",
                            when + rng.uniform(-299, 299)) == KEY, (i, url)


def refusal(req: sigv4.SignedRequest, now: float, region: str = "us-east-1") -> tuple[str, int]:
    with pytest.raises(sigv4.SigV4Refusal) as info:
        sigv4.verify(req, secrets_of(KEY, SECRET), region, "lambda", now)
    return info.value.code, info.value.status


def with_header(req: sigv4.SignedRequest, name: str, value: str | None) -> sigv4.SignedRequest:
    headers = [(k, v) for k, v in req.headers if k.lower() != name.lower()]
    if value is not None:
        headers.append((name, value))
    return sigv4.SignedRequest(req.method, req.path, req.query, headers, req.body)


def test_each_refusal_has_aws_code() -> None:
    url = "http://127.0.0.1:9/2025-12-01/durable-executions/x/pause"
    req, when = botocore_signed("POST", url, {}, b"{}")
    assert refusal(req, when + 301) == ("InvalidSignatureException", 403)  # expired
    assert refusal(req, when - 301) == ("InvalidSignatureException", 403)  # not yet current
    assert refusal(req, when, region="eu-west-1") == ("InvalidSignatureException", 403)
    other, _ = botocore_signed("POST", url, {}, b"{}", secret="x" * 40)
    assert refusal(other, when) == ("InvalidSignatureException", 403)
    unknown, _ = botocore_signed("POST", url, {}, b"{}", key="AKIANOBODY0000000000")
    assert refusal(unknown, when) == ("UnrecognizedClientException", 403)
    assert refusal(with_header(req, "Authorization", None), when) == (
        "MissingAuthenticationTokenException", 403)
    assert refusal(with_header(req, "Authorization", "Bearer abc"), when) == (
        "IncompleteSignatureException", 400)
    assert refusal(with_header(req, "Authorization", "AWS4-HMAC-SHA256 Credential=a"), when) == (
        "IncompleteSignatureException", 400)
    assert refusal(with_header(req, "X-Amz-Date", None), when) == (
        "IncompleteSignatureException", 400)
    assert refusal(with_header(req, "X-Amz-Security-Token", "t"), when) == (
        "UnrecognizedClientException", 403)
    assert refusal(with_header(req, "X-Amz-Content-SHA256", "UNSIGNED-PAYLOAD"), when) == (
        "InvalidSignatureException", 403)
    body_hash = hashlib.sha256(b"{}").hexdigest()
    assert sigv4.verify(with_header(req, "X-Amz-Content-SHA256", body_hash),
                        secrets_of(KEY, SECRET), "us-east-1", "lambda", when) == KEY
    moved = sigv4.SignedRequest("POST", req.path.replace("pause", "resume"), req.query,
                                req.headers, req.body)
    assert refusal(moved, when) == ("InvalidSignatureException", 403)


def test_refusals_are_logged_once_per_client_per_window() -> None:
    now = [0.0]
    log = RefusalLog(window_s=60, now=lambda: now[0], max_clients=2)
    assert log.note("a") == 0  # the first: said at once
    assert [log.note("a") for _ in range(5)] == [None] * 5
    assert log.note("b") == 0
    now[0] = 61.0
    assert log.note("a") == 5  # the next window's first says how many were left unsaid
    assert log.note("a") is None
    log.note("c")  # over the cap: the oldest client is forgotten
    assert log.note("b") == 0
