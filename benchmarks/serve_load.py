"""Load test of `kdbert serve` on loopback: p50 / p99 latency and throughput at 1, 8 and 32 concurrent
clients, batching on (``--max-batch 32``) and off (``--max-batch 1``), against the model's own batch-1
latency in the same process count and threads (``kdbert.load(path).predict`` on one text at a time).

    python benchmarks/serve_load.py --model winner=runs/quickstart/compress/winner/model.int8.onnx \\
        --model teacher-int8=runs/quickstart/compress/teacher-onnx/model.int8.onnx --model server-alone=stub

Each client sends one SST-2 dev sentence per request, waiting for each answer before the next, on
a connection of its own. ``--client wrk`` (the default; Debian's ``wrk``, a load generator in C that
costs microseconds per request) runs each level for ``--seconds`` after ``--warmup-seconds``;
``--client httpx`` (Python, about 4 ms of CPU per request here) sends ``--requests`` per level after
``--warmup`` untimed ones. The server's own mean time per request (its ``/metrics`` latency
histogram, from reading the body to the answer) is recorded beside, and the model's own time per
text at batch 1, 8 and 32 (what batching can give at most). The model's batch-1 latency is taken
twice: in a tight loop, and paced, 1 ms idle before each call as a lone client's requests come.
``--model server-alone=stub`` serves a stub model that answers at once, through the same server
code (``serve_predictor``): the server's own cost per request. The server runs its model on
``--threads`` threads (default 1), leaving the other core to the clients. Results:
``benchmarks/results/serve_load.json`` under the model's name (``-httpx`` appended for that client).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.deploy.int8_kernels import cpu_int8_facts
from kdbert.deploy.serve import DEFAULT_MODEL_BATCH, serve_predictor

LEVELS = (1, 8, 32)
BATCHING = {"on": 32, "off": 1}
STUB = "stub"
PACED_IDLE_S = 0.001
PASSES = 3


class StubPredictor:
    """A model that answers at once: what is left of a request's time is the server's own."""

    family = type("StubFamily", (), {"name": STUB})()

    def __init__(self, batch_size: int):
        self.batch_size = batch_size

    def predict(self, items: list) -> list[dict]:
        return [{"label": "positive", "probability": 1.0} for _ in items]


def dev_sentences(data_dir: str) -> list[str]:
    with open(Path(data_dir) / "SST-2" / "dev.tsv", newline="") as f:
        return [row["sentence"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def model_latency_ms(model: str, texts: list[str], threads: int, runs: int,
                     model_batch: int) -> tuple[float, float, dict]:
    """The model's own batch-1 latency through ``kdbert.load``, in a tight loop and paced
    (``PACED_IDLE_S`` idle before each call): the lowest of ``PASSES`` medians over ``runs`` texts
    each, passes of the two kinds taken in turn (the machine's speed drifts by tens of percent
    within minutes); and its mean time per text when ``runs`` texts go in batches of 1, 8 and 32
    (dev order; a batch runs in calls of ``model_batch``, as the server runs it)."""
    from kdbert.deploy.predict import load

    predictor = load(model, threads=threads, batch_size=model_batch)
    for text in texts[:10]:
        predictor.predict([text])
    medians: dict[float, list[float]] = {0.0: [], PACED_IDLE_S: []}
    for _ in range(PASSES):
        for idle_s, found in medians.items():
            times = []
            for text in texts[:runs]:
                if idle_s:
                    time.sleep(idle_s)
                started = time.perf_counter()
                predictor.predict([text])
                times.append(1000 * (time.perf_counter() - started))
            found.append(statistics.median(times))
    per_text = {}
    for batch in (1, 8, 32):
        started = time.perf_counter()
        for start in range(0, runs, batch):
            predictor.predict(texts[start:start + batch])
        per_text[batch] = 1000 * (time.perf_counter() - started) / runs
    return min(medians[0.0]), min(medians[PACED_IDLE_S]), per_text


def server_seconds(url: str) -> tuple[float, float]:
    """The server's latency histogram so far: (sum of seconds, requests)."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("kdbert_request_latency_seconds_sum", "kdbert_request_latency_seconds_count"):
            values[name] = float(value)
    return values["kdbert_request_latency_seconds_sum"], values["kdbert_request_latency_seconds_count"]


WRK_SCRIPT = """
local bodies = {}
local next_body = 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
  next_body = tonumber(args[2]) % #bodies
end
function request()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", "/predict", {["Content-Type"] = "application/json"}, bodies[next_body])
end
"""


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def wrk_level(url: str, texts: list[str], clients: int, seconds: float, warmup_seconds: float) -> dict:
    """One level with ``wrk``: ``clients`` connections, one wrk thread, ``seconds`` timed."""
    with tempfile.TemporaryDirectory() as folder:
        script, bodies = Path(folder) / "post.lua", Path(folder) / "bodies.jsonl"
        script.write_text(WRK_SCRIPT)
        bodies.write_text("".join(json.dumps({"texts": [text]}) + "\n" for text in texts))

        def run(duration: float) -> str:
            command = ["wrk", "-t1", f"-c{clients}", f"-d{duration:g}s", "--latency", "--timeout", "10s",
                       "-s", str(script), url, "--", str(bodies), str(7919 * clients)]
            return subprocess.run(command, check=True, capture_output=True, text=True).stdout

        run(warmup_seconds)
        served_before, count_before = server_seconds(url)
        out = run(seconds)
        served, count = server_seconds(url)
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw failed requests at {clients} clients:\n{out}")
    quantiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return {"clients": clients, "requests": requests, "p50_ms": _ms(quantiles["50"]), "p99_ms": _ms(quantiles["99"]),
            "throughput_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "server_mean_ms": 1000 * (served - served_before) / (count - count_before)}


async def one_level(url: str, texts: list[str], clients: int, requests: int, warmup: int) -> dict:
    async def client(index: int, count: int, latencies: list[float]) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for i in range(count):
                text = texts[(index * 7919 + i) % len(texts)]
                started = time.perf_counter()
                answer = await http.post("/predict", json={"texts": [text]})
                answer.raise_for_status()
                latencies.append(1000 * (time.perf_counter() - started))

    await asyncio.gather(*(client(c, max(1, warmup // clients), []) for c in range(clients)))
    latencies: list[float] = []
    per_client = max(1, requests // clients)
    served_before, count_before = server_seconds(url)
    started = time.perf_counter()
    await asyncio.gather(*(client(c, per_client, latencies) for c in range(clients)))
    seconds = time.perf_counter() - started
    served, count = server_seconds(url)
    return {"clients": clients, "requests": len(latencies), "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99), "throughput_per_s": len(latencies) / seconds,
            "server_mean_ms": 1000 * (served - served_before) / (count - count_before)}


def serve_and_load(model: str, texts: list[str], max_batch: int, threads: int, args) -> list:
    port = free_port()
    options = ["--port", str(port), "--max-batch", str(max_batch), "--model-batch", str(args.model_batch)]
    command = [sys.executable, __file__, "--stub-server", *options] if model == STUB else \
        [sys.executable, "-m", "kdbert.cli", "serve", "--model", model, "--threads", str(threads), *options]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit(f"the server for {model} did not come up")
        if args.client == "wrk":
            return [wrk_level(url, texts, clients, args.seconds, args.warmup_seconds) for clients in LEVELS]
        return [asyncio.run(one_level(url, texts, clients, args.requests, args.warmup)) for clients in LEVELS]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help=f"NAME=PATH (repeatable; PATH {STUB}: a model that "
                                                         "answers at once)")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--client", choices=("wrk", "httpx"), default="wrk")
    parser.add_argument("--seconds", type=float, default=10.0, help="wrk: timed seconds per level")
    parser.add_argument("--warmup-seconds", type=float, default=2.0, help="wrk: untimed seconds before each level")
    parser.add_argument("--requests", type=int, default=640, help="httpx: timed requests per level")
    parser.add_argument("--warmup", type=int, default=64, help="httpx: untimed requests before each level")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--latency-texts", type=int, default=300, help="texts per pass of the model's own latency")
    parser.add_argument("--model-batch", type=int, default=DEFAULT_MODEL_BATCH, help="the server's --model-batch")
    parser.add_argument("--stub-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--max-batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub_server:  # the server of --model NAME=stub, started by this script
        serve_predictor(StubPredictor(min(args.max_batch, args.model_batch)), STUB, port=args.port,
                        max_batch=args.max_batch)
        return
    if args.client == "wrk" and shutil.which("wrk") is None:
        raise SystemExit("--client wrk needs wrk on the PATH (Debian: apt-get install wrk), or pass --client httpx")
    if not args.model:
        parser.error("--model NAME=PATH is required")
    texts = dev_sentences(args.data_dir)
    for named in args.model:
        name, _, path = named.partition("=")
        own, paced, per_text = (0.0, 0.0, {}) if path == STUB else \
            model_latency_ms(path, texts, args.threads, args.latency_texts, args.model_batch)
        rows = {mode: serve_and_load(path, texts, batch, args.threads, args)
                for mode, batch in BATCHING.items()}
        command = (f"python benchmarks/serve_load.py --model {named} --threads {args.threads} --client {args.client}"
                   + (f" --model-batch {args.model_batch}" if args.model_batch != DEFAULT_MODEL_BATCH else ""))
        key = name if args.client == "wrk" else f"{name}-httpx"
        save_result("serve_load", key, {"model": path, "model_batch1_ms": own, "model_batch1_paced_ms": paced,
                                        "model_ms_per_text": per_text,
                                        "model_batch": args.model_batch,
                                        "client": args.client, "rows": rows, "command": command,
                                        "cpu": cpu_int8_facts()["cpu"], **machine_info()})
        if path != STUB:
            print(f"{name}: the model alone {own:.2f} ms at batch 1 ({paced:.2f} paced); per text at batch "
                  "1 / 8 / 32: " + " / ".join(f"{ms:.2f}" for ms in per_text.values()) + " ms")
        for mode, levels in rows.items():
            for row in levels:
                print(f"  batching {mode:<3} {row['clients']:>2} clients: p50 {row['p50_ms']:.2f} ms, "
                      f"p99 {row['p99_ms']:.2f} ms, {row['throughput_per_s']:.0f} requests/s, "
                      f"server mean {row['server_mean_ms']:.2f} ms")


if __name__ == "__main__":
    main()
