"""The clients' checks: one JSON line each, and an exit on the first that fails."""

import json

from botocore.exceptions import ClientError


def check(name, ok, seen):
    print(json.dumps({"check": name, "ok": bool(ok), "seen": seen}, default=str))
    if not ok:
        raise SystemExit(f"{name}: {seen}")


def refused(name, expected, call):
    """`call` refused with the error code `expected`, or its HTTP status."""
    try:
        call()
    except ClientError as failure:
        seen = failure.response["Error"].get("Code"), failure.response["ResponseMetadata"]["HTTPStatusCode"]
        check(name, expected in seen, seen)
        return
    check(name, False, "no error")
