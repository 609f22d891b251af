"""Shared by the e2e scripts' Python parts: one JSON request to the server."""
import json
import urllib.error
import urllib.request


def call(base, path, body):
    """POSTs `body` to base + path; returns (status, the JSON answer)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
