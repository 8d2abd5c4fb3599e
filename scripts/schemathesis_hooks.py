"""Schemathesis hooks for fuzzing Idem's payments API (see scripts/fuzz-api).

Most keyed requests get a fresh Idempotency-Key, so that generated payments reach new
executions; one in eight keeps the key it was generated with, so that the same key with other
bodies (conflicts) and repeats (replays) are fuzzed too. Generated headers and bodies are left
as they are otherwise: a key the schema allows is the caller's business.

One check of Idem's own: an API caller's wrong path or method is answered by the API in the
contract's shape (`404 NOT_FOUND`, `405 METHOD_NOT_ALLOWED` with `Allow`), never by the
console that shares the port (a sign-in redirect, a cross-origin refusal, an HTML page).
"""

import json
import os
import uuid
from urllib.parse import urlsplit

import requests
import schemathesis


@schemathesis.hook
def before_call(context, case, **kwargs):
    headers = case.headers if case.headers is not None else {}
    fresh = uuid.uuid4()
    # uuid4 draws from the OS, not from `random`, which Hypothesis asks hooks to leave alone.
    if "Idempotency-Key" in headers and fresh.int % 8 != 0:
        headers["Idempotency-Key"] = f"fuzz-{fresh}"
    case.headers = headers


def contract_error(method, status, content_type, body, expected_status, expected_code):
    """Fails unless the answer is `expected_code` in the contract's shape (a HEAD's has no body)."""
    assert status == expected_status, f"answered {status}, expected {expected_status}: {body[:200]!r}"
    assert content_type.startswith("application/json"), f"answered as {content_type!r}: {body[:200]!r}"
    if method == "HEAD":
        return
    error = json.loads(body)
    assert error.get("errorCode") == expected_code, f"not {expected_code}: {error}"
    assert isinstance(error.get("message"), str) and error.get("retryable") is False, f"not the contract's shape: {error}"


@schemathesis.check
def wrong_paths_and_methods_get_the_apis_answers(ctx, response, case):
    """Every 405 is the API's; and the same request sent to paths the API lacks is the API's 404."""
    if response.status_code == 405:
        allow = response.headers.get("allow")
        assert allow, "a 405 without Allow"
        contract_error(response.request.method, 405, (response.headers.get("content-type") or [""])[0], response.content, 405, "METHOD_NOT_ALLOWED")

    sent = response.request
    url = urlsplit(sent.url)
    base = f"{url.scheme}://{url.netloc}"
    headers = {name: value for name, value in sent.headers.items() if name.lower() not in ("content-length", "host")}
    first, _, rest = url.path.lstrip("/").partition("/")
    with_key = dict(headers, Authorization=f"Bearer {os.environ['IDEM_FUZZ_API_KEY']}")
    unknown = [
        # Below one of the API's paths, as the case was sent (with or without a key).
        (f"{url.path.rstrip('/')}/unknown-segment/unknown-segment", headers),
        # A typo in the first segment, with a key.
        ("/" + "/".join(part for part in (first[:-1], rest) if part), with_key),
    ]
    for path, path_headers in unknown:
        answer = requests.request(
            sent.method, base + path, headers=path_headers, data=sent.body, allow_redirects=False, timeout=30
        )
        try:
            contract_error(sent.method, answer.status_code, answer.headers.get("content-type", ""), answer.content, 404, "NOT_FOUND")
        except AssertionError as failure:
            raise AssertionError(f"{sent.method} {path}: {failure}") from None
