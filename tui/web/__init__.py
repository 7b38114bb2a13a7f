"""`alarmtop web`: the console in a browser, through textual-serve, behind the tokens.

textual-serve runs one console process per browser session and has no
authentication of its own. `server.WebConsole` puts a login page in front: the
token typed there is checked against the ops server (a hello), the browser gets
an HttpOnly session cookie, and that session's console process is given the
token through its environment (never its command line, which every local user
can read). Without a session nothing but the login page is served: no page, no
static file, no WebSocket. The page loads nothing from outside (the web font
textual-serve links is served from its own static folder instead).

Needs the extra: `pip install 'alarmtop[web]'`.
"""
