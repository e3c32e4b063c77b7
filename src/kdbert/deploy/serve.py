"""``kdbert serve``: a model behind HTTP (FastAPI), with concurrent requests batched together.

``POST /predict`` takes ``{"texts": [...]}`` or ``{"pairs": [[a, b], ...]}`` and answers
``{"predictions": [...]}``, the records of :meth:`kdbert.deploy.predict.Predictor.predict`;
``GET /health`` names the model and its family; ``GET /metrics`` is Prometheus text.

One worker owns the model: requests wait in a queue, and the worker runs them together, up to
``max_batch`` texts, in a thread of its own so that the event loop keeps taking requests. After the
first request of a batch it waits up to ``max_wait_ms`` for more, and only while more requests are
on their way: a lone client is never kept waiting. A lone request (one model call, nothing queued or
arriving) runs on the event loop's own thread: handing it to the model thread and back slowed a
lone client's answer, while the loop had nothing else to do. A batch's texts run sorted by length in model
calls of at most ``model_batch`` texts, so that a short text is not padded to a long one's length
(the padding cost more than larger calls saved: measured in BENCHMARKS.md, "Serving under load"). Bad input is answered with a 4xx and a one-line
``{"detail": ...}``: 400 for a body that is not JSON, 413 past the limits, 422 for the wrong shape
or texts the model cannot read.
"""

import asyncio
import gc
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from kdbert.errors import KdbertError

DEFAULT_MAX_BATCH = 32
DEFAULT_MAX_WAIT_MS = 5.0
DEFAULT_MODEL_BATCH = 8
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
JSON_BYTES_PER_CHAR = 12  # the longest JSON spelling of one character: a surrogate pair, \ud83d\ude00

__all__ = ["BadRequest", "BatchingWorker", "ServeLimits", "create_app", "parse_request", "serve", "serve_predictor"]


class BadRequest(Exception):
    """A request the server refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class ServeLimits:
    """How much one request may ask: texts (or pairs) and characters per text."""

    max_texts: int = 128
    max_chars: int = 10_000

    @property
    def max_body_bytes(self) -> int:
        return 2 * self.max_texts * (self.max_chars + 8) * JSON_BYTES_PER_CHAR + 1024


def parse_request(body: bytes, limits: ServeLimits) -> list[str | tuple[str, str]]:
    """The texts or pairs of a ``/predict`` body, or :class:`BadRequest` saying what is wrong."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"body is not valid JSON ({exc}); send {{\"texts\": [...]}} or "
                              "{\"pairs\": [[a, b], ...]}") from None
    if not isinstance(payload, dict):
        raise BadRequest(422, f"body is a JSON {type(payload).__name__}; send an object, {{\"texts\": [...]}} "
                              "or {\"pairs\": [[a, b], ...]}")
    given = set(payload)
    if given not in ({"texts"}, {"pairs"}):
        unknown = sorted(given - {"texts", "pairs"})
        what = f"unknown field {unknown[0]!r}" if unknown else "no field 'texts' or 'pairs'" if not given else \
            "both 'texts' and 'pairs'"
        raise BadRequest(422, f"{what}; send exactly one of 'texts' (a list of strings) or 'pairs' "
                              "(a list of [text, text])")
    name, items = next(iter(payload.items()))
    if not isinstance(items, list) or not items:
        raise BadRequest(422, f"'{name}' must be a non-empty list")
    if len(items) > limits.max_texts:
        raise BadRequest(413, f"{len(items)} {name} in one request; at most {limits.max_texts} (--max-texts)")
    parsed = []
    for index, item in enumerate(items):
        if name == "texts" and not isinstance(item, str):
            raise BadRequest(422, f"texts[{index}] is a JSON {type(item).__name__}; each text must be a string")
        is_pair = isinstance(item, list) and len(item) == 2 and all(isinstance(text, str) for text in item)
        if name == "pairs" and not is_pair:
            raise BadRequest(422, f"pairs[{index}] is not a pair of strings; each pair must be [text, text]")
        for text in (item,) if name == "texts" else item:
            if len(text) > limits.max_chars:
                raise BadRequest(413, f"{name}[{index}] has {len(text)} characters; at most {limits.max_chars} "
                                      "per text (--max-chars)")
        parsed.append(item if name == "texts" else tuple(item))
    return parsed


@dataclass
class _Request:
    items: list
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def pairs(self) -> bool:
        return not isinstance(self.items[0], str)


class _Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("kdbert_requests", "Prediction requests received", registry=self.registry)
        self.errors = Counter("kdbert_request_errors", "Prediction requests answered with an error, by status",
                              ["status"], registry=self.registry)
        for status in ("400", "413", "422", "500"):  # at 0 from the start, so that rates have a first value
            self.errors.labels(status)
        self.latency = Histogram("kdbert_request_latency_seconds", "Time to answer a prediction request",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("kdbert_batch_size", "Texts per model run", buckets=BATCH_BUCKETS,
                                    registry=self.registry)


class BatchingWorker:
    """The one owner of the model: runs queued requests together, up to ``max_batch`` texts."""

    def __init__(self, predictor, max_batch: int, max_wait_s: float, metrics: _Metrics):
        self.predictor, self.max_batch, self.max_wait_s, self.metrics = predictor, max_batch, max_wait_s, metrics
        self.queue: asyncio.Queue[_Request] = asyncio.Queue()
        self.held: _Request | None = None  # the request that did not fit in the last batch
        self.arriving = 0  # requests being read, not yet in the queue
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdbert-model")

    async def predict(self, items: list) -> list[dict]:
        """The records of ``items``, once a batch holding them has run."""
        request = _Request(items)
        await self.queue.put(request)
        return await request.answer

    async def run(self) -> None:
        """Collect and run batches until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            first, self.held = self.held or await self.queue.get(), None
            batch, count = [first], len(first.items)
            deadline = loop.time() + self.max_wait_s
            while count < self.max_batch:
                timeout = deadline - loop.time() if self.arriving else 0
                try:
                    following = self.queue.get_nowait() if timeout <= 0 else \
                        await asyncio.wait_for(self.queue.get(), timeout)
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                if count + len(following.items) > self.max_batch:
                    self.held = following
                    break
                batch.append(following)
                count += len(following.items)
            for group in ([r for r in batch if not r.pairs], [r for r in batch if r.pairs]):
                if group:
                    await self._answer(group)

    async def _answer(self, group: list[_Request]) -> None:
        """Run a group of requests of one kind (texts or pairs) as one call; when the model refuses
        the call, run each request alone, so that only those it refuses get the error."""
        items = [item for request in group for item in request.items]
        try:
            if self._alone(group, items):
                records = self._predict(items)
            else:
                records = await asyncio.get_running_loop().run_in_executor(self.executor, self._predict, items)
        except Exception as exc:
            if len(group) == 1:
                _fail(group[0], exc)
                return
            for request in group:
                await self._answer([request])
            return
        start = 0
        for request in group:
            if not request.answer.done():
                request.answer.set_result(records[start:start + len(request.items)])
            start += len(request.items)

    def _alone(self, group: list[_Request], items: list) -> bool:
        """Whether ``group`` is one request of one model call with no other request queued, held
        or being read: nothing the event loop would take in while the model runs."""
        return (len(group) == 1 and len(items) <= self.predictor.batch_size and self.queue.empty()
                and self.held is None and not self.arriving)

    def _predict(self, items: list) -> list[dict]:
        records = self.predictor.predict(items)
        for start in range(0, len(items), self.predictor.batch_size):
            self.metrics.batch_size.observe(min(self.predictor.batch_size, len(items) - start))
        return records


def _fail(request: _Request, exc: Exception) -> None:
    if request.answer.done():
        return
    if isinstance(exc, KdbertError):
        request.answer.set_exception(BadRequest(422, str(exc).splitlines()[0]))
    else:
        request.answer.set_exception(exc)


async def _read_body(request, limit: int) -> bytes:
    """The request's body, refused with 413 as soon as it passes ``limit`` bytes."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"body over {limit} bytes; send fewer or shorter texts (--max-texts, --max-chars)")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(predictor, model_path: str, max_batch: int = DEFAULT_MAX_BATCH,
               max_wait_ms: float = DEFAULT_MAX_WAIT_MS, limits: ServeLimits = ServeLimits()):
    """The FastAPI app serving ``predictor``, the :class:`kdbert.deploy.predict.Predictor` of
    ``model_path`` (its ``batch_size`` the most texts of one model call)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    metrics = _Metrics()
    state: dict[str, BatchingWorker] = {}

    @asynccontextmanager
    async def lifespan(app):
        worker = state["worker"] = BatchingWorker(predictor, max_batch, max_wait_ms / 1000, metrics)
        task = asyncio.create_task(worker.run())
        try:
            yield
        finally:
            task.cancel()
            worker.executor.shutdown(wait=True)

    app = FastAPI(title="kdbert", lifespan=lifespan)

    async def read_items(worker: BatchingWorker, request: Request) -> list:
        """The texts or pairs of a request, counted as arriving while they are read."""
        worker.arriving += 1
        try:
            return parse_request(await _read_body(request, limits.max_body_bytes), limits)
        finally:
            worker.arriving -= 1

    @app.post("/predict")
    async def predict(request: Request):
        worker = state["worker"]
        metrics.requests.inc()
        started = time.perf_counter()
        try:
            # a JSONResponse as it is: FastAPI would otherwise walk the records through jsonable_encoder
            return JSONResponse({"predictions": await worker.predict(await read_items(worker, request))})
        except BadRequest as exc:
            metrics.errors.labels(str(exc.status)).inc()
            return JSONResponse({"detail": exc.detail}, status_code=exc.status)
        except Exception as exc:
            metrics.errors.labels("500").inc()
            logging.getLogger("uvicorn.error").exception("POST /predict failed")
            first_line = (str(exc).splitlines() or [""])[0]
            return JSONResponse({"detail": f"{type(exc).__name__}: {first_line}"}, status_code=500)
        finally:
            metrics.latency.observe(time.perf_counter() - started)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_path, "family": predictor.family.name}

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, max_batch: int = DEFAULT_MAX_BATCH,
          max_wait_ms: float = DEFAULT_MAX_WAIT_MS, threads: int | None = None,
          limits: ServeLimits = ServeLimits(), model_batch: int = DEFAULT_MODEL_BATCH,
          access_log: bool = False) -> None:
    """Load ``model`` and serve it until SIGTERM or SIGINT, which let requests in flight finish;
    ``access_log``: uvicorn's line per request (off by default: formatting and writing it was a
    sizeable share of the event loop's time per request; ``/metrics`` counts requests and errors)."""
    from kdbert.deploy.predict import load

    if min(max_batch, model_batch, limits.max_texts, limits.max_chars) < 1 or max_wait_ms < 0:
        raise KdbertError("--max-batch, --model-batch, --max-texts and --max-chars must be positive and "
                          "--max-wait-ms not negative")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)  # a PyTorch model's; ONNX Runtime's come with load()
    predictor = load(model, threads=threads, batch_size=min(max_batch, model_batch))
    serve_predictor(predictor, str(model), host, port, max_batch, max_wait_ms, limits, access_log)


def serve_predictor(predictor, model_path: str, host: str = "127.0.0.1", port: int = 8000,
                    max_batch: int = DEFAULT_MAX_BATCH, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
                    limits: ServeLimits = ServeLimits(), access_log: bool = False) -> None:
    """Serve a loaded ``predictor`` (see :func:`create_app`) until SIGTERM or SIGINT."""
    import signal

    import uvicorn

    app = create_app(predictor, model_path, max_batch, max_wait_ms, limits)
    # what is loaded now (model, tokenizer, libraries) lives as long as the server: out of the cyclic
    # collector's passes, whose full sweeps over it stalled requests in flight
    gc.collect()
    gc.freeze()
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, _exit_cleanly)
    uvicorn.run(app, host=host, port=port, access_log=access_log)


def _exit_cleanly(signum, frame) -> None:
    """A stop asked for is a clean exit: uvicorn re-raises the signal once it has shut down gracefully."""
    raise SystemExit(0)

