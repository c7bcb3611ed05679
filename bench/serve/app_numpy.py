"""The standard-library baseline of bench/serve/run.py: Python's
http.server (ThreadingHTTPServer, HTTP/1.1 keep-alive, Nagle off) and the
forward pass in numpy (weights.py). POST /predict takes trainyard's predict
body and answers {"outputs": [...], "predictions": [...]}; GET /_nodelay
reports TCP_NODELAY of the connection it came on.

    app_numpy.py MODEL_DIR      prints "port N" once it listens on 127.0.0.1
"""
import json
import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
    disable_nagle_algorithm = True
    model = None

    def log_message(self, *args):
        pass

    def reply(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        if self.path != "/predict":
            self.reply(404, {"error": "not found"})
            return
        try:
            x = np.asarray(json.loads(raw)["inputs"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            self.reply(400, {"error": str(e)})
            return
        y = self.model(x)
        self.reply(200, {"outputs": y.tolist(), "predictions": self.model.labels(y)})

    def do_GET(self):
        if self.path != "/_nodelay":
            self.reply(404, {"error": "not found"})
            return
        on = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        self.reply(200, {"pid": os.getpid(), "nodelay": [on]})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops SYNs once 32 connections
    # open at once (each drop costs the client a 1 s retransmit).
    request_queue_size = 1024


def main():
    meta, tensors = weights.load(sys.argv[1])
    Handler.model = weights.NumpyMLP(meta, tensors)
    srv = Server(("127.0.0.1", 0), Handler)
    print("port %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
