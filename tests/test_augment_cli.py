"""`kdbert augment` and `kdbert mlm-head` on tiny models: the augmented file reads back as the task."""

from __future__ import annotations

import json

import torch
from conftest import WORDS, tiny_bert_config
from transformers import BertForMaskedLM

from kdbert.cli import main
from kdbert.data.load import TaskOptions, load_task


def _tiny_mlm(folder, tokenizer):
    torch.manual_seed(0)
    BertForMaskedLM(tiny_bert_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _glove(path):
    lines = [f"{w} " + " ".join(f"{((i * 7 + j) % 11) / 10:.2f}" for j in range(4)) for i, w in enumerate(WORDS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_augmented_cola_and_rte_files_read_back_in_the_task_format(tmp_path, tiny_tokenizer, glue_dir, capsys):
    mlm, glove = _tiny_mlm(tmp_path / "mlm", tiny_tokenizer), _glove(tmp_path / "glove.txt")
    for task, folder in (("cola", "CoLA"), ("rte", "RTE")):
        out = tmp_path / f"{task}_aug.tsv"
        code = main(["augment", "--task", task, "--data-dir", str(glue_dir), "--mlm", str(mlm), "--word-vectors",
                     str(glove), "--output", str(out), "--n-aug", "3", "--max-rows", "10"])
        assert code == 0, capsys.readouterr().err
        data = load_task(TaskOptions(task, data_dir=str(glue_dir), train_file=str(out)))
        originals = load_task(TaskOptions(task, data_dir=str(glue_dir))).train[:10]
        assert len(data.train) > len(originals)
        assert {ex.label for ex in data.train} <= {ex.label for ex in originals} | {0, 1}
        assert all(ex in data.train for ex in originals)
    assert "sentences/s" in capsys.readouterr().out


def test_augmented_file_with_wrong_columns_is_refused(tmp_path, glue_dir, capsys):
    bad = tmp_path / "bad_aug.tsv"
    bad.write_text("index\tsentence1\tlabel\n0\ta cat\tentailment\n")
    code = main(["finetune", "--task", "rte", "--data-dir", str(glue_dir), "--train-file", str(bad),
                 "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "bad_aug.tsv:1: header lacks column(s) ['sentence2']" in err


def test_mlm_head_command_writes_a_masked_lm_and_report(tmp_path, tiny_tokenizer, capsys):
    encoder = _tiny_mlm(tmp_path / "enc", tiny_tokenizer)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[i:i + 12]) + " ." for i in range(0, 20)) * 20)
    out = tmp_path / "head"
    code = main(["mlm-head", "--encoder", str(encoder), "--corpus", str(corpus), "--output-dir", str(out),
                 "--steps", "2", "--batch-size", "4", "--eval-sequences", "4", "--max-seq-len", "16"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "mlm_head_report.json").read_text())
    assert BertForMaskedLM.from_pretrained(out).config.vocab_size == len(tiny_tokenizer)
    assert any("top" in key for key in json.dumps(report).split('"'))


def test_general_then_augment_then_task_distillation(tmp_path, tiny_tokenizer, glue_dir, capsys):
    """The whole TinyBERT path on tiny random models: general -> augment -> two-phase task."""
    from conftest import save_tiny_classifier

    mlm, glove = _tiny_mlm(tmp_path / "mlm", tiny_tokenizer), _glove(tmp_path / "glove.txt")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[i:i + 10]) + " ." for i in range(0, 25)) * 4)
    student_config = tmp_path / "student-config"
    tiny_bert_config(tiny_tokenizer, hidden_size=8, num_attention_heads=4, intermediate_size=16).save_pretrained(
        student_config)
    general, aug, task_out = tmp_path / "general", tmp_path / "rte_aug.tsv", tmp_path / "task"
    steps = ["--max-steps", "2", "--no-progress"]
    assert main(["distill", "general", "--teacher", str(mlm), "--student", str(student_config), "--corpus",
                 str(corpus), "--max-seq-len", "16", "--batch-size", "4", "--output-dir", str(general), *steps]) == 0
    assert main(["augment", "--task", "rte", "--data-dir", str(glue_dir), "--mlm", str(mlm), "--word-vectors",
                 str(glove), "--output", str(aug), "--n-aug", "2", "--max-rows", "8"]) == 0
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer)
    assert main(["distill", "task", "--method", "tinybert", "--teacher", str(teacher), "--student", str(general),
                 "--task", "rte", "--data-dir", str(glue_dir), "--train-file", str(aug), "--intermediate-max-steps",
                 "2", "--output-dir", str(task_out), *steps]) == 0, capsys.readouterr().err
    report = json.loads((task_out / "distill_report.json").read_text())
    assert [s["name"] for s in report["stages"]] == ["intermediate", "prediction"]
    assert set(report["dev_metrics"]) == {"accuracy", "score"}



def test_bfloat16_augmentation_writes_the_task_format(tmp_path, tiny_tokenizer, glue_dir, capsys):
    mlm, glove = _tiny_mlm(tmp_path / "mlm", tiny_tokenizer), _glove(tmp_path / "glove.txt")
    out = tmp_path / "rte_aug.tsv"
    code = main(["augment", "--task", "rte", "--data-dir", str(glue_dir), "--mlm", str(mlm), "--word-vectors",
                 str(glove), "--output", str(out), "--n-aug", "3", "--max-rows", "6", "--device", "cpu",
                 "--dtype", "bfloat16"])
    assert code == 0, capsys.readouterr().err
    assert len(load_task(TaskOptions("rte", data_dir=str(glue_dir), train_file=str(out))).train) > 6


def test_batch_tokens_option_defaults_to_the_library_default(monkeypatch):
    import inspect

    import kdbert.cli.augment
    from kdbert.cli import main
    from kdbert.augment.tinybert import BATCH_TOKENS

    assert inspect.signature(kdbert.cli.augment.augment_task).parameters["batch_tokens"].default == BATCH_TOKENS
    seen = {}

    def fake_augment_task(task, mlm, vectors, output, **settings):
        seen.update(settings)
        return {"input_rows": 0, "columns": [], "output_rows": 0, "output": output, "seconds": 0.0,
                "sentences_per_second": 0.0}

    monkeypatch.setattr(kdbert.cli.augment, "augment_task", fake_augment_task)
    assert main(["augment", "--task", "rte", "--mlm", "m", "--word-vectors", "g"]) == 0
    assert "batch_tokens" not in seen and "p" not in seen  # augment_task's own defaults apply
