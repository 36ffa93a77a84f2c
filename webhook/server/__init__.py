"""The webhook's HTTPS shell around `webhook.admission`: `gpu-webhook serve`.

app.py (the Flask app) · state.py (what a process holds) · policies.py and tls.py (what is reloaded) ·
worker.py (gunicorn's threaded worker, hardened) · runner.py (gunicorn settings and hooks) · metrics.py · logs.py.
"""

# Read by `gpu-webhook serve --help` too, which should not import the server's watches to show it (ledger.py
# uses it): an entry whose pod never appeared is released this long after it was written, once a GET confirms.
GRACE_S = 30.0

# Likewise: a starting worker waits this long for its first lists of ResourceQuotas and ledger records before it
# accepts reviews (the other workers serve meanwhile); past it, it serves and asks per namespace.
START_WAIT_S = 10.0
