"""Load test of `kdbert serve` on loopback: p50 / p99 latency and throughput at 1, 8 and 32 concurrent
clients, batching on (``--max-batch 32``) and off (``--max-batch 1``), against the model's own batch-1
latency in the same process count and threads (``kdbert.load(path).predict`` on one text at a time).

    python benchmarks/serve_load.py --model winner=runs/quickstart/compress/winner/model.int8.onnx \\
        --model teacher-int8=runs/quickstart/compress/teacher-onnx/model.int8.onnx

Each client sends one SST-2 dev sentence per request, waiting for each answer before the next
(httpx, one connection per client); ``--requests`` requests per level, after ``--warmup`` untimed
ones. The server's own mean time per request (its ``/metrics`` latency histogram, from reading the
body to the answer) is recorded beside, so that what the client costs can be told apart. The server runs its model on ``--threads`` threads (default 1), leaving the other core to
the clients. Results: ``benchmarks/results/serve_load.json`` under the model's name.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.deploy.int8_kernels import cpu_int8_facts

LEVELS = (1, 8, 32)
BATCHING = {"on": 32, "off": 1}


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


def model_latency_ms(model: str, texts: list[str], threads: int, runs: int) -> float:
    """The model's own batch-1 latency (median over ``runs`` texts) through ``kdbert.load``."""
    from kdbert.deploy.predict import load

    predictor = load(model, threads=threads)
    for text in texts[:10]:
        predictor.predict([text])
    times = []
    for text in texts[:runs]:
        started = time.perf_counter()
        predictor.predict([text])
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def server_seconds(url: str) -> tuple[float, float]:
    """The server's latency histogram so far: (sum of seconds, requests)."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("kdbert_request_latency_seconds_sum", "kdbert_request_latency_seconds_count"):
            values[name] = float(value)
    return values["kdbert_request_latency_seconds_sum"], values["kdbert_request_latency_seconds_count"]


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


def serve_and_load(model: str, texts: list[str], max_batch: int, threads: int, requests: int, warmup: int) -> list:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "kdbert.cli", "serve", "--model", model, "--port", str(port),
                               "--max-batch", str(max_batch), "--threads", str(threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
        return [asyncio.run(one_level(url, texts, clients, requests, warmup)) for clients in LEVELS]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, help="NAME=PATH (repeatable)")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--requests", type=int, default=640, help="timed requests per level")
    parser.add_argument("--warmup", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    texts = dev_sentences(args.data_dir)
    for named in args.model:
        name, _, path = named.partition("=")
        own = model_latency_ms(path, texts, args.threads, 200)
        rows = {mode: serve_and_load(path, texts, batch, args.threads, args.requests, args.warmup)
                for mode, batch in BATCHING.items()}
        command = f"python benchmarks/serve_load.py --model {named} --threads {args.threads}"
        save_result("serve_load", name, {"model": path, "model_batch1_ms": own, "rows": rows, "command": command,
                                         "cpu": cpu_int8_facts()["cpu"], **machine_info()})
        print(f"{name}: the model alone {own:.2f} ms at batch 1")
        for mode, levels in rows.items():
            for row in levels:
                print(f"  batching {mode:<3} {row['clients']:>2} clients: p50 {row['p50_ms']:.2f} ms, "
                      f"p99 {row['p99_ms']:.2f} ms, {row['throughput_per_s']:.0f} requests/s, "
                      f"server mean {row['server_mean_ms']:.2f} ms")


if __name__ == "__main__":
    main()
