"""`kdbert serve` end to end: a real uvicorn process on 127.0.0.1 serving tiny random models (a
BERT folder in PyTorch, a BiLSTM export in ONNX Runtime), talked to over HTTP with httpx."""

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
from conftest import WORDS, save_tiny_classifier, sentence

import kdbert
from kdbert.deploy.export import export_model
from kdbert.deploy.serve import DEFAULT_MODEL_BATCH
from kdbert.families.bilstm.model import init_bilstm, save_bilstm

pytest.importorskip("onnxruntime")

TOLERANCE = 1e-5  # float32 logits of the same texts batched with others, or not
START_TIMEOUT_S = 180  # four servers importing torch at once on a loaded 2-core machine can take a minute
LIMITS = ("--max-texts", "8", "--max-chars", "200")


def texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, 1, 20) for _ in range(count)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(model, log_path, *options) -> tuple[subprocess.Popen, str]:
    """A `kdbert serve` process on a free port of 127.0.0.1, and its base URL."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "kdbert.cli", "serve", "--model", str(model),
                                    "--port", str(port), *options], stdout=log, stderr=subprocess.STDOUT, env=env)
    return process, f"http://127.0.0.1:{port}"


def wait_until_up(process, url, log_path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert process.poll() is None, f"server exited {process.returncode}:\n{log_path.read_text()}"
        assert time.monotonic() < deadline, f"server did not start:\n{log_path.read_text()}"
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)


@contextmanager
def servers_of(*runs):
    """Servers of ``(model, log_path, *options)`` started together, yielding [(process, url)] once
    all answer /health; stopped at the end if still running."""
    started = [start(*run) for run in runs]
    try:
        for (process, url), run in zip(started, runs):
            wait_until_up(process, url, run[1])
        yield started
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_tokenizer):
    """{"bert": a BERT folder, "bilstm": a single-text BiLSTM's ONNX export}."""
    root = tmp_path_factory.mktemp("serve")
    bilstm, vocab, _ = init_bilstm([" ".join(WORDS)], 3, False, embedding_dim=4, hidden_size=5, fc_size=3, seed=3)
    save_bilstm(bilstm, vocab, root / "bilstm")
    export_model(root / "bilstm")
    return {"bert": save_tiny_classifier(root / "bert", tiny_tokenizer, num_labels=3),
            "bilstm": root / "bilstm" / "onnx"}


@pytest.fixture(scope="module")
def servers(models, tmp_path_factory):
    """A running server per model: {family: base URL}."""
    logs = tmp_path_factory.mktemp("logs")
    with servers_of((models["bert"], logs / "bert.log", *LIMITS),
                    (models["bilstm"], logs / "bilstm.log", *LIMITS)) as [(_, bert), (_, bilstm)]:
        yield {"bert": bert, "bilstm": bilstm}


def assert_same(records, expected):
    assert [r["label"] for r in records] == [r["label"] for r in expected]
    np.testing.assert_allclose([r["probability"] for r in records], [r["probability"] for r in expected],
                               rtol=0, atol=TOLERANCE)


def metric(text: str, name: str) -> float:
    """The value of one sample line (``name`` with its labels) of Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} in /metrics:\n{text}")


@pytest.mark.parametrize("family", ("bert", "bilstm"))
def test_predictions_are_those_of_kdbert_load(models, servers, family):
    url, items = servers[family], texts(6, seed=1)
    health = httpx.get(f"{url}/health").json()
    assert health == {"status": "ok", "model": str(models[family]), "family": {"bert": "hf"}.get(family, family)}
    response = httpx.post(f"{url}/predict", json={"texts": items})
    assert response.status_code == 200, response.text
    assert_same(response.json()["predictions"], kdbert.load(models[family]).predict(items))
    if family == "bert":
        pairs = list(zip(texts(3, seed=2), texts(3, seed=3)))
        response = httpx.post(f"{url}/predict", json={"pairs": pairs})
        assert response.status_code == 200, response.text
        assert_same(response.json()["predictions"], kdbert.load(models[family]).predict(pairs))


def test_concurrent_requests_are_answered_in_batches(models, servers):
    url = servers["bert"]
    requests = [texts(1 + i % 3, seed=10 + i) for i in range(16)]
    before = httpx.get(f"{url}/metrics").text

    async def post_all():
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await asyncio.gather(*(client.post("/predict", json={"texts": r}) for r in requests))

    responses = asyncio.run(post_all())
    expected = kdbert.load(models["bert"]).predict([t for r in requests for t in r])
    for response, request in zip(responses, requests):
        assert response.status_code == 200, response.text
        assert_same(response.json()["predictions"], expected[:len(request)])
        expected = expected[len(request):]
    after = httpx.get(f"{url}/metrics").text
    assert metric(after, "kdbert_requests_total") - metric(before, "kdbert_requests_total") == 16
    runs = metric(after, "kdbert_batch_size_count") - metric(before, "kdbert_batch_size_count")
    alone = metric(after, 'kdbert_batch_size_bucket{le="1.0"}') - metric(before, 'kdbert_batch_size_bucket{le="1.0"}')
    assert 0 < runs < 16 and runs > alone  # some model runs held several requests' texts
    capped = metric(after, f'kdbert_batch_size_bucket{{le="{DEFAULT_MODEL_BATCH:.1f}"}}') - metric(
        before, f'kdbert_batch_size_bucket{{le="{DEFAULT_MODEL_BATCH:.1f}"}}')
    assert capped == runs  # a gathered batch runs in calls of at most --model-batch texts
    assert metric(after, "kdbert_request_latency_seconds_count") >= 16


def test_a_lone_request_runs_on_the_event_loop_and_a_crowd_on_the_model_thread():
    from kdbert.deploy.serve import BatchingWorker, _Metrics

    class Recording:
        """A model that answers each text with itself and notes the thread and size of each call."""
        batch_size = 4

        def __init__(self):
            self.calls = []

        def predict(self, items):
            self.calls.append((threading.current_thread().name, len(items)))
            return [{"label": item, "probability": 1.0} for item in items]

    async def scenario(predictor):
        worker = BatchingWorker(predictor, max_batch=32, max_wait_s=0.0, metrics=_Metrics())
        running = asyncio.create_task(worker.run())
        try:
            assert await worker.predict(["a"]) == [{"label": "a", "probability": 1.0}]
            crowd = await asyncio.gather(*(worker.predict([text]) for text in "bcdef"))
            assert [answer[0]["label"] for answer in crowd] == list("bcdef")
            long = await worker.predict(list("ghijkl"))  # more texts than one model call
            assert [record["label"] for record in long] == list("ghijkl")
        finally:
            running.cancel()
            worker.executor.shutdown(wait=True)
        return threading.current_thread().name

    predictor = Recording()
    loop_thread = asyncio.run(scenario(predictor))
    model_thread = [name for name, _ in predictor.calls if name != loop_thread]
    assert predictor.calls[0] == (loop_thread, 1)  # alone: run at once, no hand-over
    assert [size for _, size in predictor.calls[1:]] == [5, 6] and len(model_thread) == 2
    assert all(name.startswith("kdbert-model") for name in model_thread)


@pytest.mark.parametrize("option", ["--max-batch", "--model-batch", "--max-texts", "--max-chars"])
def test_a_size_limit_below_one_is_refused_in_one_line(models, option, capsys):
    from kdbert.cli import main

    assert main(["serve", "--model", str(models["bert"]), option, "0"]) == 2
    assert "--model-batch, --max-texts and --max-chars must be positive" in capsys.readouterr().err


BAD_BODIES = [
    (b"{not json", 400),
    (b'["a list"]', 422),
    (b"{}", 422),
    (b'{"text": ["a"]}', 422),
    (b'{"texts": ["a"], "pairs": [["a", "b"]]}', 422),
    (b'{"texts": []}', 422),
    (b'{"texts": "a film"}', 422),
    (b'{"texts": ["a", 3]}', 422),
    (b'{"pairs": [["a", "b", "c"]]}', 422),
    (b'{"pairs": [["a", 1]]}', 422),
    (b'{"pairs": ["ab"]}', 422),
    (json.dumps({"texts": ["a film"] * 9}).encode(), 413),
    (json.dumps({"texts": ["a" * 201]}).encode(), 413),
    (json.dumps({"pairs": [["a", "b" * 201]]}).encode(), 413),
]


def test_bad_input_gets_a_4xx_with_one_line_and_the_server_goes_on(servers):
    url = servers["bert"]
    before = httpx.get(f"{url}/metrics").text
    for body, status in BAD_BODIES:
        response = httpx.post(f"{url}/predict", content=body, headers={"content-type": "application/json"})
        assert response.status_code == status, (body, response.text)
        detail = response.json()["detail"]
        assert isinstance(detail, str) and detail and "\n" not in detail, (body, detail)
    after = httpx.get(f"{url}/metrics").text
    assert metric(after, 'kdbert_request_errors_total{status="422"}') - \
        metric(before, 'kdbert_request_errors_total{status="422"}') == 10
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.post(f"{url}/predict", json={"texts": ["a film"]}).status_code == 200


def test_pairs_for_a_single_text_model_get_a_422_alone(servers):
    url = servers["bilstm"]

    async def post_both():
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await asyncio.gather(client.post("/predict", json={"pairs": [["a film", "a book"]]}),
                                        client.post("/predict", json={"texts": ["a film"]}))

    pairs, single = asyncio.run(post_both())
    assert pairs.status_code == 422 and "single sentences" in pairs.json()["detail"]
    assert single.status_code == 200, single.text
    assert httpx.get(f"{url}/health").status_code == 200


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(models, tmp_path):
    with servers_of((models["bilstm"], tmp_path / "server.log")) as [(process, url)]:
        sending = threading.Event()

        def slow_body():  # the request is in flight while its body arrives
            yield b'{"texts": ["a film",'
            sending.set()
            time.sleep(1.5)
            yield b' "a book"]}'

        result = {}
        client = threading.Thread(target=lambda: result.update(response=httpx.post(
            f"{url}/predict", content=slow_body(), headers={"content-type": "application/json"}, timeout=30)))
        client.start()
        assert sending.wait(10)
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        client.join(30)
        assert process.wait(timeout=30) == 0, (tmp_path / "server.log").read_text()
    response = result["response"]
    assert response.status_code == 200, response.text
    assert_same(response.json()["predictions"], kdbert.load(models["bilstm"]).predict(["a film", "a book"]))


def test_distilbert_mobilebert_int8_and_qa_models_serve_what_kdbert_load_predicts(tmp_path, tiny_tokenizer):
    """The other families over HTTP: a DistilBERT folder (PyTorch), a MobileBERT's int8 export (ONNX
    Runtime), and a QA model, which takes (question, context) pairs and answers with a span."""
    import torch
    from conftest import tiny_bert_config
    from test_predict import save_family, save_hf
    from transformers import BertForQuestionAnswering

    distilbert = save_family(tmp_path / "distilbert", "distilbert", tiny_tokenizer)
    mobilebert = save_family(tmp_path / "mobilebert", "mobilebert", tiny_tokenizer)
    export_model(mobilebert, quantize="int8", int8_method="dynamic")
    torch.manual_seed(0)
    qa = save_hf(tmp_path / "qa", BertForQuestionAnswering(tiny_bert_config(tiny_tokenizer)), tiny_tokenizer)
    served = {"distilbert": distilbert, "mobilebert": mobilebert / "onnx" / "model.int8.onnx", "qa": qa}
    questions = list(zip(texts(3, seed=9), [" ".join(texts(2, seed=10 + i)) for i in range(3)]))
    with servers_of(*((model, tmp_path / f"{name}.log") for name, model in served.items())) as started:
        for (name, model), (_, url) in zip(served.items(), started):
            body = {"pairs": [list(pair) for pair in questions]} if name == "qa" else {"texts": texts(5, seed=4)}
            response = httpx.post(f"{url}/predict", json=body)
            assert response.status_code == 200, (name, response.text)
            records = response.json()["predictions"]
            expected = kdbert.load(model).predict(questions if name == "qa" else body["texts"])
            if name == "qa":
                assert [r["answer"] for r in records] == [r["answer"] for r in expected]
                assert all(r["answer"] in context for r, (_, context) in zip(records, questions))
                np.testing.assert_allclose([r["score"] for r in records], [r["score"] for r in expected],
                                           rtol=0, atol=TOLERANCE)
            else:
                assert_same(records, expected)
        qa_url = started[2][1]
        response = httpx.post(f"{qa_url}/predict", json={"texts": ["a question without its context"]})
        assert response.status_code == 422 and "\n" not in response.json()["detail"], response.text
