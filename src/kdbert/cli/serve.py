"""``kdbert serve``: a trained model or its export behind HTTP, concurrent requests batched together."""

from __future__ import annotations

from kdbert.cli.common import add_command, require
from kdbert.deploy.serve import DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT_MS, DEFAULT_MODEL_BATCH, ServeLimits


def cmd_serve(args) -> int:
    from kdbert.deploy.serve import serve

    serve(args.model, host=args.host, port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
          threads=args.threads, limits=ServeLimits(max_texts=args.max_texts, max_chars=args.max_chars),
          model_batch=args.model_batch, access_log=args.access_log)
    return 0


def add_commands(sub, table: dict) -> None:
    limits = ServeLimits()
    p = add_command(sub, table, "serve", cmd_serve,
                    help="serve a trained model or its ONNX export over HTTP, batching concurrent requests",
                    description="Serve a model on FastAPI + uvicorn: POST /predict with {\"texts\": [...]} or "
                                "{\"pairs\": [[a, b], ...]} answers {\"predictions\": [...]} (the records of "
                                "`kdbert predict`); GET /health; GET /metrics (Prometheus). Concurrent requests "
                                "run together, up to --max-batch texts. SIGTERM lets requests in flight finish.")
    p.add_argument("--model", help="model folder (HF or BiLSTM, run in PyTorch), or an export of `kdbert export` "
                                   "(its folder or .onnx file, run in ONNX Runtime) (required)")
    require(p, "model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    p.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                   help=f"most texts run together from concurrent requests (default {DEFAULT_MAX_BATCH}; "
                        "1: no batching)")
    p.add_argument("--model-batch", type=int, default=DEFAULT_MODEL_BATCH,
                   help=f"most texts of one model call: a batch runs sorted by length in calls of this many "
                        f"(default {DEFAULT_MODEL_BATCH})")
    p.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                   help=f"how long a batch waits for more requests on their way (default {DEFAULT_MAX_WAIT_MS:g})")
    p.add_argument("--max-texts", type=int, default=limits.max_texts,
                   help=f"most texts or pairs per request (default {limits.max_texts})")
    p.add_argument("--max-chars", type=int, default=limits.max_chars,
                   help=f"most characters per text (default {limits.max_chars})")
    p.add_argument("--threads", type=int, help="CPU threads of the model (default: its runtime's own)")
    p.add_argument("--access-log", action="store_true",
                   help="log a line per request (default off: /metrics counts requests, errors and latency)")
