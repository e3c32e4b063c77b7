"""General students built once per base model (``kdbert students build``) and found again for a
teacher fine-tuned from that base."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from conftest import sentence, tiny_bert_config
from safetensors.torch import load_file
from transformers import BertForSequenceClassification, BertModel

from kdbert.core.relation_losses import minilm_relation_loss
from kdbert.data.batching import PaddingCollator
from kdbert.data.corpus import pack_sequences
from kdbert.errors import KdbertError
from kdbert.methods.minilm import captured_qkv
from kdbert.students.build import BuildConfig, build_students, start_students
from kdbert.students.store import FINGERPRINT_FILE, find_build, weights_key

SHAPES = "bert-1x128,bert-2x128"
SEQ_LEN, HELD_OUT, BATCH = 16, 8, 4


def save_base(folder: Path, tokenizer, seed: int = 0) -> Path:
    """A tiny pre-trained-like base: a bare BertModel, 2 layers of 128 (4 heads of 32), no dropout;
    weights drawn wide (std 0.5) so that its attention relations are far from uniform."""
    torch.manual_seed(seed)
    config = tiny_bert_config(tokenizer, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.5)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("students")
    rng = random.Random(0)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(60)) + "\n")
    return {"root": root, "base": save_base(root / "base", tiny_tokenizer), "corpus": corpus,
            "tokenizer": tiny_tokenizer}


def config(env, store: Path, **overrides) -> BuildConfig:
    values = dict(base=str(env["base"]), corpus=[str(env["corpus"])], shapes=SHAPES, store=str(store),
                  max_seq_len=SEQ_LEN, held_out=HELD_OUT, batch_size=BATCH, budget_minutes=10.0,
                  no_progress=True, save_every=2)
    return BuildConfig(**{**values, **overrides})


@pytest.fixture(scope="module")
def built(env):
    """One build run to its end (3 epochs of the tiny corpus, well within its budget)."""
    store = env["root"] / "store"
    return store, build_students(config(env, store))


def test_a_build_writes_each_shape_its_facts_and_the_base_fingerprint(env, built):
    store, facts = built
    folder = store / weights_key(env["base"])
    assert facts["shapes"] == ["bert-1x128", "bert-2x128"] and facts["key"] == folder.name
    sequences = pack_sequences(env["tokenizer"], [env["corpus"]], SEQ_LEN, None, 42)
    train_rows = len(sequences) - HELD_OUT
    assert facts["steps"] == 3 * -(-train_rows // BATCH)  # every epoch ran: the budget was not reached
    assert facts["sequences_seen"] == facts["steps"] * BATCH
    assert json.loads((folder / "build.json").read_text()) == facts
    for name, layers in (("bert-1x128", 1), ("bert-2x128", 2)):
        student = BertModel.from_pretrained(folder / name)
        assert (student.config.num_hidden_layers, student.config.hidden_size) == (layers, 128)
        init = json.loads((folder / name / "student_init.json").read_text())
        assert (init["start"], init["key"], init["steps"]) == ("general", folder.name, facts["steps"])
    base = BertModel.from_pretrained(env["base"])
    rows = base.get_input_embeddings().weight[torch.linspace(0, base.config.vocab_size - 1,
                                                             min(512, base.config.vocab_size)).round().long()]
    torch.testing.assert_close(load_file(str(folder / FINGERPRINT_FILE))["rows"], rows.detach())
    # the trainer's own copy of the students is removed once they are split by shape
    assert not (folder / "run" / "model.safetensors").exists() and not (folder / "run" / "best").exists()


def test_held_out_losses_are_the_relation_loss_of_the_held_out_rows_before_and_after(env, built):
    store, facts = built
    base = BertModel.from_pretrained(env["base"]).eval()
    held = pack_sequences(env["tokenizer"], [env["corpus"]], SEQ_LEN, None, 42)[-HELD_OUT:]
    # one padded batch of every held-out row: the mean over all their real tokens at once
    batch = PaddingCollator(0)([{"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
                                for ids in held])
    assert len({len(ids) for ids in held}) > 1  # some are padded (a document ends), so token weighting matters

    def loss(student, heads):
        with torch.no_grad():
            return float(minilm_relation_loss(captured_qkv(student.eval(), -1, batch, "student"),
                                              captured_qkv(base, 2, batch, "teacher"), batch["attention_mask"], heads))

    start = start_students(base, {"bert-1x128": {"num_hidden_layers": 1, "hidden_size": 128,
                                                 "num_attention_heads": 4, "intermediate_size": 256}}, 42)
    # float32 sums of a few thousand terms batched differently (4 rows at a time there, one padded batch
    # here): relative error ~ sqrt(terms) * 6e-8 ~ 4e-6, plus build.json's rounding to 5 decimals
    close = dict(rel=1e-5, abs=1e-5)
    first, last = facts["history"][0], facts["history"][-1]
    assert first["steps"] == 0 and last["steps"] == facts["steps"]
    # 128-wide students of a 128-wide base: 12 does not divide 128, so 8 relation heads
    assert facts["relation_heads"] == {"bert-1x128": 8, "bert-2x128": 8} and facts["relation_layer"] == 2
    assert first["held_out_loss"]["bert-1x128"] == pytest.approx(loss(start["bert-1x128"], 8), **close)
    trained = BertModel.from_pretrained(store / facts["key"] / "bert-1x128")
    assert last["held_out_loss"]["bert-1x128"] == pytest.approx(loss(trained, 8), **close)
    assert last["held_out_loss"]["bert-1x128"] < first["held_out_loss"]["bert-1x128"]


def test_one_base_pass_feeds_every_shape(env, tmp_path, monkeypatch):
    calls = []
    original = BertModel.forward

    def counted(self, *args, **kwargs):
        calls.append(self.config.name_or_path == str(env["base"]))  # the students' configs have no path
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BertModel, "forward", counted)
    facts = build_students(config(env, tmp_path, held_out=HELD_OUT, max_sequences=HELD_OUT + 2 * BATCH))
    # the base: once before training and once after on the held-out batches (2 each), once per step
    assert facts["steps"] == 6 and sum(calls) == 2 + 6 + 2


def test_a_build_continues_to_a_larger_budget_and_ends_as_one_straight_build(env, tmp_path):
    straight = build_students(config(env, tmp_path / "straight"))
    tiny = config(env, tmp_path / "continued", budget_minutes=1e-6)  # its deadline has passed after one step
    first = build_students(tiny)
    assert first["steps"] == 1 and len(first["history"]) == 2
    assert build_students(tiny) == first  # the same budget again: nothing to do
    continued = build_students(config(env, tmp_path / "continued"))
    assert continued["steps"] == straight["steps"] and [h["steps"] for h in continued["history"]] == [0, 1,
                                                                                                      straight["steps"]]
    for name in ("bert-1x128", "bert-2x128"):
        a = BertModel.from_pretrained(tmp_path / "straight" / straight["key"] / name).state_dict()
        b = BertModel.from_pretrained(tmp_path / "continued" / continued["key"] / name).state_dict()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


def test_bad_builds_are_refused_in_one_line(env, tmp_path):
    with pytest.raises(KdbertError, match=r"--shapes bert-9x128: not a BERT-style shape compress times for this "
                                          r"base; choose from bert-1x128, bert-2x128"):
        build_students(config(env, tmp_path, shapes="bert-1x128,bert-9x128"))
    with pytest.raises(KdbertError, match=r"--shapes: none of bert-1x128, bert-2x128 has at most 25% of the base's "
                                          r"compute per token; name the shapes to build"):
        build_students(config(env, tmp_path, shapes=None))
    with pytest.raises(KdbertError, match=r"--corpus gives \d+ sequences of 16 tokens, not more than --held-out "
                                          r"1000; give more text or a smaller --held-out"):
        build_students(config(env, tmp_path, held_out=1000))
    build_students(config(env, tmp_path, max_sequences=HELD_OUT + BATCH))
    with pytest.raises(KdbertError, match=r"holds a build of this base with other shapes; pass the same options "
                                          r"to continue it, --overwrite to build again, or another --store"):
        build_students(config(env, tmp_path, shapes="bert-1x128", max_sequences=HELD_OUT + BATCH))


def test_a_teacher_fine_tuned_from_the_base_finds_its_build_and_another_model_does_not(env, built, tiny_tokenizer):
    store, facts = built
    base = BertModel.from_pretrained(env["base"])
    teacher = BertForSequenceClassification(base.config)
    teacher.bert.load_state_dict(base.state_dict())
    with torch.no_grad():  # "fine-tuned": its embeddings moved by 5% of their norm
        teacher.bert.embeddings.word_embeddings.weight.mul_(1.05)
    found, drift = find_build(teacher, store)
    assert found.folder == store / facts["key"] and drift == pytest.approx(0.05, abs=1e-6)
    with torch.no_grad():
        teacher.bert.embeddings.word_embeddings.weight.mul_(1.25 / 1.05)  # 25%: past MAX_DRIFT
    assert find_build(teacher, store) is None
    other = BertModel(tiny_bert_config(tiny_tokenizer, hidden_size=64, num_attention_heads=2))
    assert find_build(other, store) is None  # another width: no fingerprint to compare


# ----------------------------------------------------------------------------- compress starts from them
def test_compress_starts_candidates_of_a_built_shape_from_their_general_student(tmp_path, tiny_tokenizer, capsys):
    from conftest import record_held_out, save_tiny_classifier, write_glue_task

    from kdbert.cli import main
    from kdbert.data.load import TaskOptions

    write_glue_task(tmp_path / "glue", "SST-2", n_train=12, n_dev=8)
    teacher_dir = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, hidden_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=256)
    record_held_out(teacher_dir, TaskOptions("sst2", data_dir=str(tmp_path / "glue")), 0.2)
    teacher = BertForSequenceClassification.from_pretrained(teacher_dir)
    base_dir = tmp_path / "base"  # the teacher's own encoder as its base: drift 0
    teacher.bert.save_pretrained(base_dir)
    tiny_tokenizer.save_pretrained(base_dir)
    rng = random.Random(1)
    (tmp_path / "corpus.txt").write_text("\n\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(20)))
    store = tmp_path / "store"
    facts = build_students(BuildConfig(base=str(base_dir), corpus=[str(tmp_path / "corpus.txt")], shapes="bert-2x128",
                                       store=str(store), max_seq_len=SEQ_LEN, held_out=4, batch_size=4,
                                       max_sequences=12, no_progress=True))
    args = ["compress", "--teacher", str(teacher_dir), "--task", "sst2", "--data-dir", str(tmp_path / "glue"),
            "--candidates", "bert-1x128,bert-2x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01", "--students-store", str(store)]
    capsys.readouterr()
    assert main([*args, "--keep", "runs", "--output-dir", str(tmp_path / "general")]) == 0  # starts read below
    printed = capsys.readouterr().out
    assert (f"general students: general student built from {base_dir} for {facts['trained_seconds'] / 60:.0f} min "
            f"({facts['steps']} steps, store {store / facts['key']}); the teacher's embeddings are 0.0% from that "
            "base's") in printed
    report = json.loads((tmp_path / "general" / "compress_report.json").read_text())
    assert report["starts"] == {"bert-1x128": "teacher-weights", "bert-2x128": "general"}
    # the candidate with a general start leads its family, ahead of the faster bert-1x128
    assert [row["candidate"] for row in report["search"]["segments"]] == ["bert-2x128", "bert-1x128"]
    assert report["general_students"]["key"] == facts["key"]
    general = BertModel.from_pretrained(store / facts["key"] / "bert-2x128").state_dict()
    start = BertForSequenceClassification.from_pretrained(tmp_path / "general" / "starts" / "bert-2x128")
    for key, value in start.bert.state_dict().items():
        assert torch.equal(value, general[key]), key
    markdown = (tmp_path / "general" / "compress_report.md").read_text()
    assert "| kd, general start |" in markdown
    assert f"bert-2x128 started from the general students built from {base_dir}" in markdown

    assert main([*args, "--output-dir", str(tmp_path / "off"), "--no-general-students"]) == 0
    report = json.loads((tmp_path / "off" / "compress_report.json").read_text())
    assert report["starts"] == {"bert-1x128": "teacher-weights", "bert-2x128": "teacher-weights"}
    assert report["general_students"] is None and "general start" not in (tmp_path / "off" / "compress_report.md").read_text()


def test_the_cli_builds_lists_and_refuses_a_missing_corpus_in_one_line(env, built, tmp_path, capsys):
    from kdbert.cli import main

    store, facts = built
    capsys.readouterr()
    assert main(["students", "list", "--store", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    last = facts["history"][-1]["held_out_loss"]
    assert out == [f"general student built from {env['base']} for {facts['trained_seconds'] / 60:.0f} min "
                   f"({facts['steps']} steps, store {store / facts['key']})",
                   f"  bert-1x128 (held-out relation loss {last['bert-1x128']:.4f}), "
                   f"bert-2x128 (held-out relation loss {last['bert-2x128']:.4f})"]
    assert main(["students", "list", "--store", str(tmp_path / "empty")]) == 0
    assert "no general students in" in capsys.readouterr().out
    args = ["students", "build", "--base", str(env["base"]), "--shapes", "bert-1x128", "--store", str(tmp_path),
            "--max-seq-len", str(SEQ_LEN), "--held-out", "4", "--batch-size", "4", "--max-sequences", "8",
            "--no-progress"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().startswith("kdbert: error: --corpus is required; give it on the command line")
    assert main([*args, "--corpus", str(env["corpus"])]) == 0
    printed = capsys.readouterr().out
    assert "built 1 shapes for" in printed and "held-out relation loss, selection start -> now:" in printed
