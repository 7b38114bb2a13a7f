"""When the console redraws: often enough to look live, seldom enough to stay responsive.

Pure, no Textual: the app says what happened and when (seconds on any monotonic
clock) and asks how long to wait before the next redraw.

A redraw refills the current view, and Textual then repaints every table row
whose cells changed: on a busy server, every visible row of every redraw (the
countdowns moved). Frames arrive 4 times a second and the countdowns need a
redraw twice a second, so drawing on each of them would mean a repaint of every
row every 170 ms or so, and a key pressed meanwhile waits for it. So:

- a frame marks the view stale; a stale view is redrawn at once if the last redraw
  is `min_gap_s` old, else when it is (frames that land in between share it);
- with no frame, the countdowns still move: a redraw `countdown_s` after the last;
- for `key_quiet_s` after a key, redraws wait, so the repaint showing the key is not
  also repainting every row; but never past `max_stale_s` after the last redraw,
  so a held key does not freeze the view.
"""

from __future__ import annotations

from dataclasses import dataclass

NEVER = float("-inf")


@dataclass
class RedrawPacer:
    min_gap_s: float = 0.25  # the server's delta tick: one redraw per delta at most
    countdown_s: float = 0.5
    key_quiet_s: float = 0.15
    max_stale_s: float = 0.5
    stale: bool = False  # a frame changed what the view shows since the last redraw
    last_redraw: float = NEVER
    last_key: float = NEVER

    def changed(self) -> None:
        self.stale = True

    def key(self, now: float) -> None:
        self.last_key = now

    def drawn(self, now: float) -> None:
        self.stale, self.last_redraw = False, now

    def wait(self, now: float) -> float:
        """Seconds until the next redraw is due; 0 when it is due now."""
        due = self.last_redraw + (self.min_gap_s if self.stale else self.countdown_s)
        after_key = self.last_key + self.key_quiet_s
        if after_key > due:
            due = max(due, min(after_key, self.last_redraw + self.max_stale_s))
        return max(0.0, due - now)
