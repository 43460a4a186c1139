"""A WSGI app whose client is made at import, before gunicorn --preload forks its
workers (test_life.py): each request takes a lock and answers with its fencing token."""

import os

import redlease

client = redlease.Client.connect(os.environ["REDLEASE_TEST_URL"])
with client.lock("preload-import", ttl=5.0):
    pass  # the parent used its connection before the fork


def app(environ, start_response):
    with client.lock("preload", ttl=5.0, wait=30.0) as guard:
        body = f"{os.getpid()} {guard.fencing_token}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
