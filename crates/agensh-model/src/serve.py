# agensh's model server: xllamacpp (llama.cpp's server inside Python) on one GGUF file.
# argv[1] is a JSON object of settings. Prints "AGENSH_LISTENING <url>" on stdout once it
# serves. Exits when stdin reaches EOF (the parent died or let go of it) and on SIGTERM.
import json
import os
import signal
import sys
import threading

signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.SIG_DFL)


def watch_stdin():
    try:
        while sys.stdin.buffer.read(65536):
            pass
    finally:
        os._exit(0)


# Started before the model loads, so a parent that dies while loading is noticed too.
watcher = threading.Thread(target=watch_stdin, daemon=True)
watcher.start()


def main():
    cfg = json.loads(sys.argv[1])
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = cfg["model"]
    p.n_ctx = cfg["n_ctx"]
    p.n_parallel = cfg["parallel"]
    p.cpuparams.n_threads = cfg["threads"]
    p.cpuparams_batch.n_threads = cfg["threads"]
    p.hostnames = [cfg["host"]]
    p.port = cfg["port"]
    p.model_alias = {cfg["alias"]}
    # Each worker's conversation grows at its end: keep prompts cached (in the slot and in
    # host memory) and reuse cached runs after a change earlier in the prompt.
    p.cache_prompt = True
    p.cache_ram_mib = cfg["cache_ram_mib"]
    p.n_cache_reuse = cfg["cache_reuse"]
    p.endpoint_metrics = False
    server = xlc.Server(p)
    print("AGENSH_LISTENING " + server.listening_address, flush=True)
    watcher.join()
    return server


# Never return into interpreter shutdown: the watcher holds stdin's lock, and a normal
# shutdown with it blocked aborts. Report and leave with os._exit instead.
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
except BaseException:
    import traceback

    traceback.print_exc()
    code = 1
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
