"""The webhook's HTTPS shell around `webhook.admission`: `gpu-webhook serve`.

app.py (the Flask app) · state.py (what a process holds) · policies.py and tls.py (what is reloaded) ·
worker.py (gunicorn's threaded worker, hardened) · runner.py (gunicorn settings and hooks) · metrics.py · logs.py.
"""
