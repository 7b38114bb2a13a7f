"""alarmtop's Textual console."""
