"""`kdbert distill task --method bilstm`: the distilled BiLSTM on the one front, end to end on tiny
models (GLUE files, own CSV data, an augmented file), its first-step loss terms against a
hand computation, the teacher-logit store's reuse and invalidation, and bad input."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import WORDS, count_teacher_runs, save_tiny_classifier, store_namespaces, write_glue_task
from transformers import BertForSequenceClassification

import kdbert.core.teacher_logits as teacher_logits
from kdbert.cli import main
from kdbert.data.load import TaskOptions, load_task
from kdbert.methods.front import distill_task
from kdbert.families.bilstm.model import init_bilstm, is_bilstm_folder, load_bilstm

DIM = 4


def write_vectors(path, words=WORDS, dim=DIM):
    """A tiny GloVe-format file: one deterministic vector per word."""
    path.write_text("".join(f"{w} " + " ".join(f"{((i + 1) * (j + 3)) % 7 / 10 - 0.3:.2f}" for j in range(dim)) + "\n"
                            for i, w in enumerate(words)))
    return path


@pytest.fixture
def env(tmp_path, tiny_tokenizer):
    root = tmp_path / "glue_data"
    for task in ("SST-2", "MRPC", "STS-B"):
        write_glue_task(root, task)
    return {"root": root, "tmp": tmp_path, "vectors": write_vectors(tmp_path / "vectors.txt"),
            "teacher2": save_tiny_classifier(tmp_path / "teacher2", tiny_tokenizer),
            "teacher1": save_tiny_classifier(tmp_path / "teacher1", tiny_tokenizer, num_labels=1),
            "teacher3": save_tiny_classifier(tmp_path / "teacher3", tiny_tokenizer, num_labels=3)}


def cli(env, task, teacher="teacher2", out="out", extra=()):
    return main(["distill", "task", "--method", "bilstm", "--task", task, "--data-dir", str(env["root"]),
                 "--teacher", str(env[teacher]), "--word-vectors", str(env["vectors"]), "--hidden-size", "6",
                 "--fc-size", "5", "--epochs", "2", "--output-dir", str(env["tmp"] / out), "--no-progress", *extra])


def options(env, teacher="teacher2", **extra):
    return {"method": "bilstm", "teacher": str(env[teacher]), "word_vectors": str(env["vectors"]), "hidden_size": 6,
            "fc_size": 5, "no_progress": True, **extra}


def first_step(out):
    return json.loads((out / "log.jsonl").read_text().splitlines()[0])


def dev_texts(data):
    """Every text of the task's dev split(s), which the recipe builds the vocabulary from too."""
    return [text for split in data.dev.values() for example in split for text in example.texts]


# ----------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("task", ["sst2", "mrpc"])
def test_cli_distils_evaluates_and_benches_a_bilstm_on_glue(env, task, capsys):
    assert cli(env, task) == 0, capsys.readouterr().err
    out = env["tmp"] / "out"
    report = json.loads((out / "distill_report.json").read_text())
    assert report["method"] == "bilstm" and report["matches"] == {"bilstm": ["distill: 1 * squared_l2(logits, logits)"]}
    assert report["student"]["config"]["pair"] is (task == "mrpc")
    assert report["student"]["embeddings"]["with_vector"] > 0
    assert is_bilstm_folder(out)
    model, vocab = load_bilstm(out)
    assert len(vocab) == report["student"]["vocab_size"] and model.config.hidden_size == 6
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--task", task, "--data-dir", str(env["root"])]) == 0
    saved = json.loads((out / f"eval_{task}.json").read_text())
    assert saved == pytest.approx(report["dev_metrics"])
    assert main(["bench", "--model", str(out), "--compare", str(env["teacher2"]), "--seq-len", "8", "--runs", "2",
                 "--threads", "1", "--output", str(env["tmp"] / "bench.json")]) == 0
    teacher_row, student_row = json.loads((env["tmp"] / "bench.json").read_text())
    e, h, f = DIM, 6, 5
    sentences, features = (2, 8 * h) if task == "mrpc" else (1, 2 * h)
    assert student_row["flops_per_example"] == sentences * 2 * 8 * 2 * 4 * h * (e + h) + 2 * features * f + 2 * f * 2
    assert student_row["params_total"] == sum(p.numel() for p in model.parameters())
    assert student_row["params_non_embedding"] == student_row["params_total"] - len(vocab) * e


def test_cli_on_own_csv_data_and_an_augmented_file_with_stored_logits(env, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(WORDS, 5)), int(rng.integers(0, 2))) for _ in range(30)]
    data = env["tmp"] / "reviews.csv"
    data.write_text("review,stars\n" + "".join(f"{t},{y}\n" for t, y in rows))
    extra = ("--text-columns", "review", "--label-column", "stars")
    assert main(["distill", "task", "--method", "bilstm", "--task", str(data), "--teacher", str(env["teacher2"]),
                 "--epochs", "1", "--embedding-dim", "3", "--hidden-size", "4", "--fc-size", "4", "--output-dir",
                 str(env["tmp"] / "own"), "--no-progress", *extra]) == 0, capsys.readouterr().err
    assert load_bilstm(env["tmp"] / "own")[0].config.embedding_dim == 3  # random embeddings without vectors
    capsys.readouterr()  # predict reads the rows by the column the student was trained on
    assert main(["predict", "--model", str(env["tmp"] / "own"), "--input", str(data)]) == 0, capsys.readouterr().err
    assert len(capsys.readouterr().out.splitlines()) == 30  # one JSON line per row
    assert store_namespaces(env["tmp"] / "reviews.csv.teacher-logits")  # stored beside the user's file
    # An augmented file as `kdbert augment --method bilstm --teacher` leaves it: logits already stored.
    augmented = env["tmp"] / "train_aug.tsv"
    augmented.write_text("review\tstars\n" + "".join(f"{t}\t{y}\n{'[MASK] ' + t}\t{y}\n" for t, y in rows[:20]))
    teacher = BertForSequenceClassification.from_pretrained(env["teacher2"])
    from kdbert.core.loading import load_tokenizer

    texts = [(line.split("\t")[0],) for line in augmented.read_text().splitlines()[1:]]
    teacher_logits.label_with_teacher(teacher, load_tokenizer(str(env["teacher2"])), texts,
                                      teacher_logits.store_folder(augmented), 64)
    seen = count_teacher_runs(monkeypatch)
    dev = env["tmp"] / "dev.tsv"
    dev.write_text("review\tstars\n" + "".join(f"{t}\t{y}\n" for t, y in rows[20:]))
    assert main(["distill", "task", "--method", "bilstm", "--task", str(augmented), "--dev-file", str(dev),
                 "--teacher", str(env["teacher2"]), "--word-vectors", str(env["vectors"]), "--epochs", "1",
                 "--hidden-size", "4", "--fc-size", "4", "--output-dir", str(env["tmp"] / "aug"), "--no-progress",
                 *extra]) == 0, capsys.readouterr().err
    assert seen == []  # the teacher did not run again
    vocab = load_bilstm(env["tmp"] / "aug")[1]
    assert vocab.index["[MASK]"] == vocab.mask_id == 2 and vocab.encode("[MASK] cat") == [2, vocab.index["cat"]]


def test_frequent_vector_words_join_the_vocabulary_and_dev_only_words_stay_unk(env):
    """--frequent-words 1: the vectors' first word that no training row has gets its own id and keeps
    its vector (no training row moves it); a dev word with a vector past it stays [UNK], as in a
    user's text; the report names the sources and what new text gets."""
    root = env["tmp"] / "own_glue"
    (root / "SST-2").mkdir(parents=True)
    train = ["the cat sat", "a dog ran", "the dog sat", "a cat ran"] * 3
    (root / "SST-2" / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n"
                                                                            for i, t in enumerate(train)))
    (root / "SST-2" / "dev.tsv").write_text("sentence\tlabel\nthe zebra sat\t1\na lion ran\t0\n")
    vectors = write_vectors(env["tmp"] / "zebra.txt", words=("the", "a", "cat", "lion", "dog", "sat", "ran", "zebra"))
    out = env["tmp"] / "frequent_words"
    report = distill_task(TaskOptions("sst2", data_dir=str(root)),
                          options(env, word_vectors=str(vectors), frequent_words=1, batch_size=4, max_steps=3),
                          str(out))
    assert report["student"]["vocab_sources"] == {"train": 6, "frequent vector words": 1}
    # dev: the zebra sat a lion ran -> unknown: zebra and lion, then zebra only
    assert report["student"]["dev_oov_rate"] == {"train words only": 0.3333, "with frequent vector words": 0.1667}
    model, vocab = load_bilstm(out)
    assert vocab.index["lion"] == 9 and vocab.encode("lion zebra [MASK]") == [9, vocab.unk_id, vocab.mask_id]
    assert len({vocab.unk_id, vocab.mask_id, *vocab.encode("the a cat dog sat ran lion")}) == 9
    vector = {line.split()[0]: torch.tensor([float(x) for x in line.split()[1:]])
              for line in vectors.read_text().splitlines()}
    assert torch.equal(model.embeddings.weight[9], vector["lion"])
    assert not torch.equal(model.embeddings.weight[vocab.index["the"]], vector["the"])  # a training word's row trained


def test_hidden_size_defaults_per_sentence_or_pair_and_the_option_wins(env, monkeypatch):
    import kdbert.methods.bilstm as recipe

    assert (recipe.HIDDEN_SIZE, recipe.PAIR_HIDDEN_SIZE) == (150, 150)  # the paper's: the authors' pair 300 measured no better
    monkeypatch.setattr(recipe, "HIDDEN_SIZE", 3)
    monkeypatch.setattr(recipe, "PAIR_HIDDEN_SIZE", 7)  # the one place the pair default is set
    for task, hidden, expected in (("sst2", None, 3), ("mrpc", None, 7), ("mrpc", 6, 6)):
        out = env["tmp"] / f"{task}-{hidden}"
        report = distill_task(TaskOptions(task, data_dir=str(env["root"])),
                              options(env, hidden_size=hidden, max_steps=1), str(out))
        assert report["student"]["config"]["hidden_size"] == expected
        assert load_bilstm(out)[0].forward_lstm.hidden_size == expected


# ----------------------------------------------------------------------------- the loss
def hand_terms(env, task, teacher, alpha):
    """The first step's terms computed directly: the initial student (rebuilt with the same
    seed) and the teacher on every training row (one batch)."""
    from kdbert.core.loading import load_tokenizer

    data = load_task(TaskOptions(task, data_dir=str(env["root"])))
    student, vocab, _ = init_bilstm([t for ex in data.train for t in ex.texts], data.spec.num_labels,
                                    data.spec.is_pair, str(env["vectors"]), seed=42, dev_texts=dev_texts(data),
                                    hidden_size=6, fc_size=5)
    model = BertForSequenceClassification.from_pretrained(env[teacher]).eval()
    tokenizer = load_tokenizer(str(env[teacher]))
    sums, hard = [], []
    with torch.no_grad():
        for example in data.train:
            ids = [torch.tensor([vocab.encode(t)]) for t in example.texts]
            inputs = {"input_ids": ids[0], "attention_mask": torch.ones_like(ids[0])}
            if len(ids) == 2:
                inputs.update(input_ids_b=ids[1], attention_mask_b=torch.ones_like(ids[1]))
            s = student(**inputs).logits[0]
            t = model(**tokenizer(*example.texts, return_tensors="pt")).logits[0]
            sums.append(float(((s - t) ** 2).sum()))
            y = example.label
            hard.append(float((s[0] - y) ** 2) if data.spec.is_regression else
                        float(F.cross_entropy(s[None], torch.tensor([y]))))
    terms = {"distill": alpha * sum(sums) / len(sums)}
    if alpha < 1:
        terms["hard"] = (1 - alpha) * sum(hard) / len(hard)
    return terms


@pytest.mark.parametrize("task, teacher, alpha", [("sst2", "teacher2", 0.7), ("stsb", "teacher1", 1.0)])
def test_first_step_terms_equal_a_hand_computation(env, task, teacher, alpha):
    out = env["tmp"] / "loss"
    distill_task(TaskOptions(task, data_dir=str(env["root"])),
                 options(env, teacher, alpha=alpha, batch_size=64, max_steps=1), str(out))
    logged = first_step(out)
    expected = hand_terms(env, task, teacher, alpha)
    assert {k: logged[k] for k in expected} == pytest.approx(expected, rel=1e-5)
    assert logged["loss"] == pytest.approx(sum(expected.values()), rel=1e-5)


def test_labels_only_never_runs_the_teacher_and_adamw_and_frozen_embeddings(env, monkeypatch):
    seen = count_teacher_runs(monkeypatch)
    out = env["tmp"] / "labels"
    report = distill_task(TaskOptions("sst2", data_dir=str(env["root"])),
                          options(env, alpha=0.0, optimizer="adamw", freeze_embeddings=True, max_steps=2), str(out))
    assert seen == [] and "teacher_logits" not in report
    assert report["matches"] == {"bilstm": ["hard: 1 * hard_label(logits, labels)"]}
    assert report["stages"][0]["optimizer"] == "adamw" and report["stages"][0]["learning_rate"] == 1e-3
    data = load_task(TaskOptions("sst2", data_dir=str(env["root"])))
    initial, _, _ = init_bilstm([t for ex in data.train for t in ex.texts], 2, False, str(env["vectors"]), seed=42,
                                dev_texts=dev_texts(data), hidden_size=6, fc_size=5)
    trained = load_bilstm(out)[0]
    assert torch.equal(trained.embeddings.weight, initial.embeddings.weight)
    assert not torch.equal(trained.classifier.weight, initial.classifier.weight)


def test_adadelta_defaults_are_the_papers(env, capsys):
    """Adadelta as the paper runs it, from the command line too: lr 1.0 constant, rho 0.95, eps
    1e-6, no weight decay and no gradient clipping. (The command line's --weight-decay default
    0.01 used to override the method's 0, and the trainer's clipping to norm 1.0 applied: the L2
    term Adadelta adds after clipping then outweighed the clipped gradient and the loss rose.)"""
    from kdbert.methods.registry import method_config

    config = method_config("bilstm", {}).resolved("sst2")
    assert (config.optimizer, config.learning_rate, config.batch_size, config.alpha, config.weight_decay,
            config.max_grad_norm) == ("adadelta", 1.0, 50, 1.0, 0.0, 0.0)
    assert method_config("bilstm", {"optimizer": "adamw"}).resolved("sst2").max_grad_norm == 1.0
    assert cli(env, "sst2", out="adadelta", extra=("--max-steps", "1")) == 0, capsys.readouterr().err
    out = env["tmp"] / "adadelta"
    stage = json.loads((out / "distill_report.json").read_text())["stages"][0]
    assert (stage["optimizer"], stage["schedule"], stage["learning_rate"], stage["weight_decay"],
            stage["max_grad_norm"]) == ("adadelta", "constant", 1.0, 0.0, None)
    optimizer = torch.load(next((out / "checkpoints").iterdir()) / "optimizer.pt", weights_only=True)["optimizer"]
    assert {(g["lr"], g["rho"], g["eps"], g["weight_decay"]) for g in optimizer["param_groups"]} == \
        {(1.0, 0.95, 1e-6, 0.0)}
    report = distill_task(TaskOptions("sst2", data_dir=str(env["root"])),
                          options(env, optimizer="adamw", max_grad_norm=0.5, max_steps=1), str(env["tmp"] / "adamw"))
    assert (report["stages"][0]["schedule"], report["stages"][0]["max_grad_norm"]) == ("linear", 0.5)


# ----------------------------------------------------------------------------- the teacher-logit store
def test_teacher_logits_are_stored_once_and_recomputed_only_for_a_new_row_or_teacher(env, tiny_tokenizer,
                                                                                      monkeypatch):
    seen = count_teacher_runs(monkeypatch)
    task = TaskOptions("sst2", data_dir=str(env["root"]))
    distill_task(task, options(env, max_steps=1), str(env["tmp"] / "a"))
    assert len(seen) == len({ex.texts for ex in load_task(task).train})
    distill_task(task, options(env, max_steps=1, seed=7), str(env["tmp"] / "b"))
    first = len(seen)
    assert first == len({ex.texts for ex in load_task(task).train})  # reused by another run and seed
    train = env["root"] / "SST-2" / "train.tsv"
    with open(train, "a") as handle:
        handle.write("a brand new red tree\t1\n")
    distill_task(task, options(env, max_steps=1), str(env["tmp"] / "c"))
    assert seen[first:] == [("a brand new red tree",)]  # a changed file: only its new row
    other = save_tiny_classifier(env["tmp"] / "other", tiny_tokenizer, seed=5)
    distill_task(task, {**options(env, max_steps=1), "teacher": str(other)}, str(env["tmp"] / "d"))
    assert len(seen) == first + 1 + first + 1  # another teacher never reads the first one's logits
    assert len(store_namespaces(env["root"] / "SST-2" / "train.tsv.teacher-logits")) == 2


def test_read_only_data_goes_to_the_logits_cache(env, monkeypatch):
    cache = env["tmp"] / "cache"
    distill_task(TaskOptions("sst2", data_dir=str(env["root"])), options(env, max_steps=1, logits_cache=str(cache)),
                 str(env["tmp"] / "cached"))
    assert len(store_namespaces(cache)) == 1
    assert not (env["root"] / "SST-2" / "train.tsv.teacher-logits").exists()


# ----------------------------------------------------------------------------- bad input
def test_bad_input_is_one_line_with_exit_2(env, tmp_path, capsys):
    def error(*args, task="sst2", teacher="teacher2"):
        capsys.readouterr()
        assert cli(env, task, teacher, "bad", args) == 2
        message = capsys.readouterr().err
        assert message.startswith("kdbert: error: ") and message.count("\n") == 1
        assert not (env["tmp"] / "bad").exists()  # nothing written for a refused input
        return message

    assert "--min-count" in error("--min-count", "1000")  # empty vocabulary
    assert "--frequent-words must be a whole number of words, 0 or more (got -1)" in error("--frequent-words", "-1")
    binary = tmp_path / "vectors.bin"
    binary.write_bytes(b"2 4\n\xff\xfe\x00\x01 binary")
    assert "not UTF-8 text" in error("--word-vectors", str(binary))
    short = tmp_path / "short.txt"
    short.write_text("cat 0.1 0.2 0.3 0.4\ndog 0.1 0.2\n")
    assert "short.txt:2: expected a word and 4 numbers" in error("--word-vectors", str(short))
    assert "have 4 dimensions but the student's embeddings have 8; set --embedding-dim 4" in error(
        "--embedding-dim", "8")
    assert "3 output(s) but the task needs 2" in error(teacher="teacher3")
    assert "--student does not apply to --method bilstm" in error("--student", "tinybert4")
    assert "option and --method bilstm does not use it" in error("--temperature", "2")
    one_column = tmp_path / "mrpc_one.tsv"
    one_column.write_text("Quality\t#1 ID\t#2 ID\t#1 String\n1\t1\t2\tthe cat sat\n")
    assert "mrpc_one.tsv" in error("--train-file", str(one_column), task="mrpc")


def test_augment_bilstm_refuses_tinybert_settings(env, capsys):
    code = main(["augment", "--method", "bilstm", "--task", "sst2", "--data-dir", str(env["root"]), "--p", "0.3"])
    assert code == 2 and "--p is not an option of --method bilstm" in capsys.readouterr().err
    code = main(["augment", "--method", "bilstm", "--task", "sst2", "--data-dir", str(env["root"]), "--top-k", "5"])
    assert code == 2 and "--top-k is not an option of --method bilstm" in capsys.readouterr().err


def test_python_api_on_own_jsonl_pairs_and_augment_then_distill(env, tmp_path):
    """Own JSONL sentence pairs, through the Python API: augment --method bilstm (labelled by the
    teacher once), then distil from the augmented file; the student reads pairs."""
    from kdbert.cli.augment import augment_task_bilstm

    rng = np.random.default_rng(1)
    rows = [{"q1": " ".join(rng.choice(WORDS, 4)), "q2": " ".join(rng.choice(WORDS, 3)),
             "same": int(rng.integers(0, 2))} for _ in range(24)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TaskOptions(str(data), text_columns=("q1", "q2"), label_column="same", dev_fraction=0.25)
    augmented = tmp_path / "pairs_aug.jsonl"
    nltk_data = Path(__file__).resolve().parents[2] / "shared" / "data" / "nltk_data"
    augment_task_bilstm(task, augmented, seed=3, n_iter=2, nltk_data=str(nltk_data), teacher=str(env["teacher2"]))
    written = [json.loads(line) for line in augmented.read_text().splitlines()]
    assert set(written[0]) == {"q1", "q2", "same"} and len(written) > len(rows) * 0.75
    assert store_namespaces(tmp_path / "pairs_aug.jsonl.teacher-logits")  # labelled once, beside the file
    report = distill_task(TaskOptions(str(augmented), text_columns=("q1", "q2"), label_column="same",
                                      dev_file=str(data)), options(env, epochs=1), str(tmp_path / "student"))
    assert report["student"]["config"]["pair"] is True
    assert load_bilstm(tmp_path / "student")[0].config.pair


def test_teacher_onnx_labels_the_stored_logits(env):
    """``--teacher-onnx``: the teacher's export labels the rows (its logits, not PyTorch's: stored apart)."""
    from kdbert.deploy.export import export_model

    export_model(env["teacher2"], env["tmp"] / "teacher-onnx", quantize="int8")
    graph = str(env["tmp"] / "teacher-onnx" / "model.int8.onnx")
    assert cli(env, "sst2", extra=("--teacher-onnx", graph, "--logits-cache", str(env["tmp"] / "store"))) == 0
    report = json.loads((env["tmp"] / "out" / "distill_report.json").read_text())
    assert report["teacher_logits"]["onnx"] == graph and report["teacher_logits"]["store"] == str(env["tmp"] / "store")
