"""Keep the console's long-lived objects out of the garbage collector's full passes.

A full collection walks every object the collector tracks. With its views
composed the console holds some 160,000 (widget trees, styles, Textual itself);
under a busy feed a full pass came about once a second and took 40-200 ms on a
loaded 2-core machine, and many of the keypresses slower than 100 ms had waited
for one. The views live as long as the console, so once one is composed what
exists is frozen (`gc.freeze()`): later full passes skip those objects, most of
them, and are shorter. Frozen cyclic garbage is not freed until `thaw()`, which
the console calls when it exits; what is made after a freeze is collected as
usual.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """What exists now lives on: leave it out of later full collections."""
    gc.freeze()


def thaw() -> None:
    """Give everything frozen back to the collector (the console is leaving)."""
    gc.unfreeze()
