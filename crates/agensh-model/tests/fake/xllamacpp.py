# A stand-in for the xllamacpp package in tests: the same attributes serve.py sets, and a
# plain HTTP server answering /health. Records what it was given in params.json next to
# the model path; a model path containing "fail" makes it exit like a failed load.
import http.server
import json
import os
import sys
import threading


class _Bag:
    pass


class CommonParams:
    def __init__(self):
        self.model = _Bag()
        self.cpuparams = _Bag()
        self.cpuparams_batch = _Bag()
        self.hostnames = ["127.0.0.1"]
        self.port = 0
        self.model_alias = set()


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"ok"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        # A chat completion with llama.cpp's timings, and the request recorded.
        n = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(n))
        body = json.dumps({
            "choices": [{"message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 300, "completion_tokens": request.get("max_tokens", 1)},
            "timings": {"prompt_per_second": 61.5, "predicted_per_second": 9.8},
            "request": request,
        }).encode()
        self.send_response(200 if self.path == "/v1/chat/completions" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server:
    def __init__(self, p):
        path = p.model.path
        if "fail" in os.path.basename(path):
            print("boom: cannot load " + path, file=sys.stderr, flush=True)
            sys.exit(3)
        rec = {
            "model": path,
            "n_ctx": p.n_ctx,
            "n_parallel": p.n_parallel,
            "threads": p.cpuparams.n_threads,
            "batch_threads": p.cpuparams_batch.n_threads,
            "hostnames": p.hostnames,
            "port": p.port,
            "alias": sorted(p.model_alias),
            "cache_prompt": p.cache_prompt,
            "cache_ram_mib": p.cache_ram_mib,
            "n_cache_reuse": p.n_cache_reuse,
            "pid": os.getpid(),
        }
        with open(os.path.join(os.path.dirname(path), "params.json"), "w") as f:
            json.dump(rec, f)
        self._s = http.server.ThreadingHTTPServer((p.hostnames[0], p.port), _Health)
        threading.Thread(target=self._s.serve_forever, daemon=True).start()
        self.listening_address = "http://%s:%d" % (p.hostnames[0], self._s.server_port)
