"""Print the conformance pass count per suite.

    .venv/bin/python -m tests.conformance.report [pytest options]

Runs `test_conformance.py` (fetching the suite's wheel on first use) and prints
`suite: passed/total` lines; the same lines end every pytest run that includes
the conformance tests (see `conftest.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    args = [str(here / "test_conformance.py"), "-q", "-rsx", "--no-header",
            *(sys.argv[1:] if argv is None else argv)]
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
