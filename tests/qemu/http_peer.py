#!/usr/bin/env python3
"""http_peer.py ADDR PORT BYTES: the TCP peer of the QEMU tap test (tap_test.sh).

GET /blob answers BYTES of random data (no NUL byte: busybox wget's --post-file sends the file
as a C string) and prints "blob md5=HEX bytes=N" on stdout; POST /upload
answers "md5=HEX bytes=N" of the body it received, so that the guest can compare both ends of
each direction with its own md5sum. Busybox wget in the guest is the client.
"""
import hashlib
import http.server
import os
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/blob":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BLOB)))
        self.end_headers()
        self.wfile.write(BLOB)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        answer = f"md5={hashlib.md5(body).hexdigest()} bytes={len(body)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, fmt, *args):
        sys.stderr.write("http_peer: " + fmt % args + "\n")


addr, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
BLOB = os.urandom(size).replace(b"\0", b"\1")
print(f"blob md5={hashlib.md5(BLOB).hexdigest()} bytes={size}", flush=True)
http.server.HTTPServer((addr, port), Handler).serve_forever()
