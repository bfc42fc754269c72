"""A local stand-in for the Hugging Face hub's download API, for tests/python/test_model_store.py.

It serves the two URL shapes `mlxcel pull` uses, as the hub documents them
(huggingface_hub's HfApi.model_info / hf_hub_url):
  GET /api/models/{owner}/{name}/revision/{rev}[?blobs=true]
      -> {"id", "sha", "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}]}
         (size and lfs only with blobs=true, lfs only for large files)
  GET /{owner}/{name}/resolve/{rev}/{path}
      -> the file; honours "Range: bytes=N-" with 206 and Content-Range (RFC 9110 section 14).
Faults the tests ask for: a required token (401 without "Authorization: Bearer TOKEN", as the hub
answers for gated/private repos), a connection dropped halfway through a file (once), and a file
whose bytes differ from the sha256 the API lists. Every request is logged.
"""
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit, parse_qs


class Hub:
    def __init__(self):
        self.repos = {}          # "owner/name" -> {rev: {path: bytes}}
        self.lfs = set()         # paths listed with lfs (sha256)
        self.token = None        # required bearer token, if any
        self.drop_once = set()   # (repo, path) to cut halfway, once
        self.corrupt = set()     # (repo, path) served with flipped bytes
        self.listed_size = {}    # (repo, path) -> size the API claims (a disk-space test)
        self.log = []            # (method, path, headers dict)
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, body=b"", ctype="application/json", extra=None):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                with hub.lock:
                    hub.log.append(("GET", self.path, dict(self.headers)))
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._send(401, b'{"error":"Invalid credentials in Authorization header"}')
                url = urlsplit(self.path)
                parts = [unquote(p) for p in url.path.split("/")[1:]]
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                    return self.api(parts[2] + "/" + parts[3], "/".join(parts[5:]),
                                    parse_qs(url.query).get("blobs") == ["true"])
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
                self._send(404, b'{"error":"not found"}')

            def api(self, repo, rev, blobs):
                files = hub.repos.get(repo, {}).get(rev)
                if files is None:
                    return self._send(404, json.dumps({"error": f"Repository or revision not found: {repo}@{rev}"}).encode())
                sib = []
                for path, data in sorted(files.items()):
                    s = {"rfilename": path}
                    if blobs:
                        s["size"] = hub.listed_size.get((repo, path), len(data))
                        s["blobId"] = hashlib.sha1(data).hexdigest()
                        if path in hub.lfs:
                            s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                        "pointerSize": 134}
                    sib.append(s)
                body = {"id": repo, "sha": "0123456789abcdef0123456789abcdef01234567", "siblings": sib}
                self._send(200, json.dumps(body).encode())

            def resolve(self, repo, rev, path):
                files = hub.repos.get(repo, {}).get(rev)
                if files is None or path not in files:
                    return self._send(404, b'{"error":"Entry not found"}')
                data = files[path]
                if (repo, path) in hub.corrupt:
                    data = bytes(b ^ 0xFF for b in data)
                start, code, extra = 0, 200, {"Accept-Ranges": "bytes"}
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(data):
                        return self._send(416, b"", extra={"Content-Range": f"bytes */{len(data)}"})
                    code = 206
                    extra["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                body = data[start:]
                with hub.lock:
                    drop = (repo, path) in hub.drop_once
                    hub.drop_once.discard((repo, path))
                if drop:
                    # Promise the whole body, send half of it, hang up.
                    self.send_response(code)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    import socket
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(code, body, "application/octet-stream", extra)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, repo, files, rev="main", lfs=()):
        self.repos.setdefault(repo, {})[rev] = dict(files)
        self.lfs.update(lfs)

    def requests(self, needle=""):
        with self.lock:
            return [r for r in self.log if needle in r[1]]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
