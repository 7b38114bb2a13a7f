"""alarmtop: durable objects with alarms, durable saga executions, and a console to
watch and steer them.

The import packages are `alarmtop.core` (the runtime), `alarmtop.server` (the ops
server), `alarmtop.tui` (the console), `alarmtop.testing` (the pytest plugin) and
`alarmtop.examples`. This package holds only what the distribution as a whole
answers for: `python -m alarmtop` runs the `alarmtop` command (`__main__.py`).
"""
