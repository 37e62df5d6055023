"""Where the event loop's CPU goes per request under load: ``lnserve serve``'s app run in this process (the
same uvicorn configuration: uvloop, httptools, the deadline protocol), ``benchmarks/http_load.py``'s load
generator in another process (``--concurrency`` clients, one sentence per ``POST /encode``), and the loop
thread's CPU time (``time.thread_time``) over the load window divided by the requests served; beside it the
whole server process's (the batcher and onnxruntime threads too) and the load generator's. With
``--profile``, cProfile runs on the loop thread over the same window and the top functions (own time and
cumulative, per request) are printed; the profiler's overhead inflates those times, so the CPU per request
line without ``--profile`` is the one to compare. ``--bare`` measures ``http_load.py``'s bare FastAPI app the
same way (uvloop, httptools, no access log), its baseline. Not a test: run it by hand.

    python benchmarks/http_profile.py [--concurrency 16] [--seconds 5] [--profile] [--top 30] [--bare]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOAD = """
import asyncio, json, sys
sys.path.insert(0, {root!r})
from benchmarks.http_load import http_load, vocabulary
from lnserve.app.demo_model.data import ensure_demo_artifact
r = asyncio.run(http_load({url!r}, {c}, {s}, vocabulary(ensure_demo_artifact())))
print(json.dumps({{"rps": r[0], "p50": r[1], "p99": r[2], "errors": r[3]}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--bare", action="store_true", help="The bare FastAPI app of http_load.py instead.")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    os.environ.update(
        LNSERVE_THREADS="1", LNSERVE_ACCESS_LOG="false", LNSERVE_MAX_QUEUE="100000",
        LNSERVE_MAX_INFLIGHT="100000", LNSERVE_GALLERIES_DIR=str(tmp / "galleries"),
    )  # fmt: skip
    import httpx
    import uvicorn

    from lnserve.app.http.main import create_app
    from lnserve.app.http.server import uvicorn_config
    from lnserve.app.settings import Settings
    from tests.e2e.server import free_port

    port = free_port()
    if args.bare:
        config = uvicorn.Config(
            _bare_app(tmp), loop="uvloop", http="httptools", access_log=False, log_level="warning"
        )
    else:
        settings = Settings()
        config = uvicorn_config(create_app(settings), settings)
    config.host, config.port = "127.0.0.1", port
    server = uvicorn.Server(config)
    url = f"http://127.0.0.1:{port}"
    prof = cProfile.Profile()
    window: dict[str, float] = {}

    def on_loop(what: str) -> None:  # run in the loop's thread
        window[what] = time.thread_time()
        window[f"{what}_process"] = time.process_time()  # every thread of the server: loop, batcher, ORT
        if args.profile:
            (prof.enable if what == "start" else prof.disable)()

    def drive() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        httpx.post(url + "/encode", json={"sentences": ["warm up"] * 4}, timeout=60)
        loop = server_loop[0]
        loop.call_soon_threadsafe(on_loop, "start")
        code = LOAD.format(root=str(ROOT), url=url, c=args.concurrency, s=args.seconds)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        loop.call_soon_threadsafe(on_loop, "stop")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        window["client"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        time.sleep(0.5)
        result.update(json.loads(out.stdout.strip().splitlines()[-1]))
        server.should_exit = True

    server_loop: list[asyncio.AbstractEventLoop] = []
    result: dict[str, float] = {}

    async def serve() -> None:
        server_loop.append(asyncio.get_running_loop())
        threading.Thread(target=drive, daemon=True).start()
        await server.serve()

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:  # uvloop, as ``lnserve serve``
        runner.run(serve())
    served = result["rps"] * args.seconds
    cpu_ms = (window["stop"] - window["start"]) * 1000 / served
    process_ms = (window["stop_process"] - window["start_process"]) * 1000 / served
    client_ms = window["client"] * 1000 / served  # the load generator's whole run (start-up included)
    what = "bare FastAPI app" if args.bare else "lnserve"
    print(f"{what}   load: {os.getloadavg()}   concurrency {args.concurrency}, {args.seconds:.0f} s")
    print(
        f"req/s {result['rps']:,.0f}  p50 {result['p50']:.2f} ms  errors {result['errors']:.0f}  "
        f"loop CPU per request {cpu_ms:.3f} ms" + ("  (profiled)" if args.profile else "")
    )
    print(
        f"CPU per request: server {process_ms:.3f} ms (loop {cpu_ms:.3f}, other threads "
        f"{process_ms - cpu_ms:.3f}: batcher, onnxruntime), load generator {client_ms:.3f} ms; "
        f"all three on {os.cpu_count()} cores"
    )
    if args.profile:
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(args.top)
            print(f"\n--- by {key} (times for {served:,.0f} requests) ---")
            print("\n".join(s.getvalue().splitlines()[6:]))


def _bare_app(tmp: Path) -> Any:
    """``http_load.BARE_APP`` at the demo model's dimension, imported from ``tmp``."""
    import importlib

    from benchmarks.http_load import BARE_APP
    from lnserve.app.demo_model.data import ensure_demo_artifact
    from lnserve.app.runtime.engine import Engine

    dim = Engine.open(ensure_demo_artifact(), threads=1).output_dim
    (tmp / "bare_app.py").write_text(BARE_APP.format(dim=dim), encoding="utf-8")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("bare_app").app


if __name__ == "__main__":
    main()
