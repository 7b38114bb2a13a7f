"""`python -m alarmtop`: the `alarmtop` command, as the console script runs it."""

from __future__ import annotations

import sys

from alarmtop.tui.cli import main

if __name__ == "__main__":
    sys.exit(main())
