"""Schemathesis hooks for fuzzing Idem's payments API (see scripts/fuzz-api).

Most keyed requests get a fresh Idempotency-Key, so that generated payments reach new
executions; one in eight keeps the key it was generated with, so that the same key with other
bodies (conflicts) and repeats (replays) are fuzzed too. Generated headers and bodies are left
as they are otherwise: a key the schema allows is the caller's business.
"""

import uuid

import schemathesis


@schemathesis.hook
def before_call(context, case, **kwargs):
    headers = case.headers if case.headers is not None else {}
    fresh = uuid.uuid4()
    # uuid4 draws from the OS, not from `random`, which Hypothesis asks hooks to leave alone.
    if "Idempotency-Key" in headers and fresh.int % 8 != 0:
        headers["Idempotency-Key"] = f"fuzz-{fresh}"
    case.headers = headers
