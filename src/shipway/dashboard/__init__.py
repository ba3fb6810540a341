"""``shipway dashboard``: a read-only web page of every app and slot this machine knows.

:mod:`.reads` gathers what the page shows through the API's reads (``ls``, ``status``,
``history``, ``diff``, ``generations``, ``log_view``), secrets masked; :mod:`.server` serves
it over HTTP from the standard library (GET and HEAD only, loopback unless a token is
given); ``static/`` holds the page itself: plain HTML, CSS and JavaScript, no build step.
docs/dashboard.md says what it shows and how it is measured.
"""
