"""The AWS SDK's own handlers on alarmtop: what does not pass, and why.

Every requirement id of `aws-durable-execution-conformance-tests` 1.0.0 runs its
handler from the SDK's conformance folder (`sdk_handlers`), unchanged, through
alarmtop with the real SDK, unless it is listed here:

* `CANNOT_RUN`: the handler cannot run here as it is (with why); reported as a skip
  that names the reason.
* `DIFFERS`: the handler runs and is expected to fail against its requirement
  (`xfail(strict=True)`, with why): when alarmtop is fixed, the strict xfail fails
  and the entry must go.

`NO_REQUIREMENT` lists the handlers the templates map to ids the wheel has no
requirement for (the SDK repository is newer than the 1.0.0 wheel): they are
reported, not run. Nothing is left out silently: `test_sdk_manifest_is_whole`
checks that these lists and the wheel agree.
"""

from __future__ import annotations

CANNOT_RUN: dict[str, str] = {
    "3-12": "the handler counts its attempts in a DynamoDB table on AWS through boto3 "
            "(there is no AWS here; it would need the handler changed)",
}

# Handlers that end their own process (os._exit) inside a step, as a Lambda crash:
# they run with register_lambda(isolation="process"), as they would have to anywhere.
IN_A_PROCESS: frozenset[str] = frozenset({"1-17", "1-18"})

DIFFERS: dict[str, str] = {
}

# Ids the templates name that the 1.0.0 wheel has no requirement for.
NO_REQUIREMENT: frozenset[str] = frozenset(f"10-{n}" for n in range(8, 19))


def reason(requirement_id: str) -> str | None:
    return CANNOT_RUN.get(requirement_id)
