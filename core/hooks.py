"""Lifecycle hooks for plugins (`alarmtop.core.kernel.hooks`, documented there).

The public face: `from alarmtop.core.hooks import Plugin` keeps working for users.
"""

from alarmtop.core.kernel.hooks import HOOKS, Hooks, Plugin

__all__ = ["HOOKS", "Hooks", "Plugin"]
