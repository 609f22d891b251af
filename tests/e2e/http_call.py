"""Shared by the e2e scripts' Python parts: one JSON request to the server."""
import json
import urllib.error
import urllib.request


def post_text(base, path, body):
    """POSTs `body` to base + path; returns (status, the answer's text): a
    stream's events, say."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def call(base, path, body):
    """POSTs `body` to base + path; returns (status, the JSON answer)."""
    status, text = post_text(base, path, body)
    return status, json.loads(text)
