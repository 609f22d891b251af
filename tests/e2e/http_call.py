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


def request(base, path, data=None, method=None, headers=None):
    """One request of any method with a raw body (or none); returns (status,
    the answer's Content-Type, its raw body)."""
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def upload(base, content, purpose="batch", filename="in.jsonl"):
    """POST /v1/files as OpenAI's client sends it (multipart/form-data, the
    boundary quoted); returns (status, the JSON answer)."""
    b = "troupe-e2e-boundary"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f'Content-Type: application/octet-stream\r\n\r\n').encode() + content + f'\r\n--{b}--\r\n'.encode()
    status, _, text = request(base, "/v1/files", body, headers={"Content-Type": f'multipart/form-data; boundary="{b}"'})
    return status, json.loads(text)
