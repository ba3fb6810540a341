"""hello: a tiny web app (standard library only) for trying shipway.

GET /up   health check: 200 when healthy. Set HELLO_FAIL=1 to make it fail (500), so a
          release is refused by the health gate and the previous one keeps serving.
GET /     a greeting naming the release that serves it.
GET /slow?seconds=N   the same greeting after N seconds (to watch a redeploy drain it).
"""

import http.server
import os
import socketserver
import time
import urllib.parse

PORT = int(os.environ.get("PORT", "8000"))
FAIL = os.environ.get("HELLO_FAIL") == "1"
GREETING = os.environ.get("GREETING", "hello")
RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/up":
            code, body = (500, b"failing on purpose\n") if FAIL else (200, b"ok\n")
        elif url.path == "/slow":
            query = urllib.parse.parse_qs(url.query)
            time.sleep(min(float(query.get("seconds", ["2"])[0]), 60.0))
            code, body = 200, f"{GREETING} from {RELEASE}, slowly\n".encode()
        else:
            code, body = 200, f"{GREETING} from {RELEASE}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        note = " (HELLO_FAIL=1: failing on purpose)" if FAIL and self.path == "/up" else ""
        print(f"{self.address_string()} {format % args}{note}", flush=True)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


if __name__ == "__main__":
    print(f"hello {RELEASE} listening on 127.0.0.1:{PORT}", flush=True)
    if FAIL:
        print("HELLO_FAIL=1: /up answers 500, so the health gate refuses this release", flush=True)
    Server(("127.0.0.1", PORT), Handler).serve_forever()
