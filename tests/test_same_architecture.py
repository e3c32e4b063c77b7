"""Students of the teacher's own architecture (RoBERTa, XLM-R, MPNet, ELECTRA, DistilBERT, BERT): weight
selection checked by hand per architecture, their candidates, MPNet's traced attention scores,
RoBERTa's position limit, a teacher kdbert cannot cut, and ``kdbert compress`` on a RoBERTa teacher."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import record_held_out, write_glue_task
from torch import nn
from transformers import (AlbertConfig, AlbertForSequenceClassification, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification, BertConfig, DistilBertConfig, ElectraConfig, MPNetConfig,
                          RobertaConfig, RobertaForSequenceClassification, XLMRobertaConfig)

from kdbert.compress import speed
from kdbert.families.importance import Importance
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.registry import ShapeContext
from kdbert.families.selection import select_teacher_weights, task_config

TEACHER = dict(hidden_size=48, num_hidden_layers=4, num_attention_heads=12, intermediate_size=64)  # heads of 4 dims
NARROW = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=6, intermediate_size=32)
"""Half the width, heads, FFN and depth: hidden units, heads and FFN units 0, 2, 4, ...; layers g(m) 2 and 4."""


def _config(kind: str, vocab: int, **shape):
    common = dict(vocab_size=vocab, max_position_embeddings=66, num_labels=2)
    shape = {**TEACHER, **shape}
    if kind == "distilbert":
        return DistilBertConfig(dim=shape["hidden_size"], n_layers=shape["num_hidden_layers"],
                                n_heads=shape["num_attention_heads"], hidden_dim=shape["intermediate_size"], **common)
    if kind in ("electra", "electra-projected"):  # projected: 16-wide embeddings, projected to the hidden width
        return ElectraConfig(embedding_size=16 if kind == "electra-projected" else shape["hidden_size"], **shape,
                             **common)
    configs = {"bert": BertConfig, "roberta": RobertaConfig, "xlm-roberta": XLMRobertaConfig, "mpnet": MPNetConfig}
    return configs[kind](**shape, **common, **({"pad_token_id": 0} if "roberta" in kind else {}))


# per architecture, written out by hand: the base model's name, layers, query, FFN output and word table (below a
# layer or the base), and the first-token dense layer of the classification head
PATHS = {
    "bert": ("bert", "encoder.layer", "attention.self.query", "output.dense", "embeddings.word_embeddings",
             "bert.pooler.dense"),
    "roberta": ("roberta", "encoder.layer", "attention.self.query", "output.dense", "embeddings.word_embeddings",
                "classifier.dense"),
    "xlm-roberta": ("roberta", "encoder.layer", "attention.self.query", "output.dense", "embeddings.word_embeddings",
                    "classifier.dense"),
    "mpnet": ("mpnet", "encoder.layer", "attention.attn.q", "output.dense", "embeddings.word_embeddings",
              "classifier.dense"),
    "electra": ("electra", "encoder.layer", "attention.self.query", "output.dense", "embeddings.word_embeddings",
                "classifier.dense"),
    "electra-projected": ("electra", "encoder.layer", "attention.self.query", "output.dense",
                          "embeddings.word_embeddings", "classifier.dense"),
    "distilbert": ("distilbert", "transformer.layer", "attention.q_lin", "ffn.lin2", "embeddings.word_embeddings",
                   "pre_classifier"),
}
KINDS = list(PATHS)


def _teacher(kind: str, tokenizer):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(_config(kind, len(tokenizer))).eval()


def _student(teacher, question_answering: bool = False, **shape):
    config = task_config(teacher.config, {**TEACHER, **shape}, 2, question_answering)
    head = AutoModelForQuestionAnswering if question_answering else AutoModelForSequenceClassification
    torch.manual_seed(1)
    return head.from_config(config).eval()


def _output_layer(model) -> list:
    """The parameters of a classification head's output layer (``classifier`` or ``classifier.out_proj``)."""
    return [p for name, p in model.named_parameters() if name.startswith(("classifier.weight", "classifier.bias",
                                                                          "classifier.out_proj."))]


@pytest.mark.parametrize("kind", KINDS)
def test_a_narrow_student_takes_the_teachers_rows_for_its_heads_units_and_layers(kind, tiny_tokenizer):
    teacher = _teacher(kind, tiny_tokenizer)
    student = _student(teacher, **NARROW)
    fresh_output = [p.clone() for p in _output_layer(student)]
    picked = select_teacher_weights(student, teacher)
    assert picked["teacher_layers"] == [2, 4]
    base, layers, query, ffn_out, words, pooler = PATHS[kind]
    s_layers = student.get_submodule(f"{base}.{layers}")
    t_layers = teacher.get_submodule(f"{base}.{layers}")
    # student head 1 of 6 is teacher head 2 of 12 (rows 8..11, each head's 4 dims kept), reading hidden units 0, 2, ...
    s_query, t_query = s_layers[0].get_submodule(query), t_layers[1].get_submodule(query)
    assert torch.equal(s_query.weight[4:8], t_query.weight[8:12, ::2])
    assert torch.equal(s_query.bias[4:8], t_query.bias[8:12])
    s_out, t_out = s_layers[1].get_submodule(ffn_out), t_layers[3].get_submodule(ffn_out)  # rows: units, columns: FFN
    assert torch.equal(s_out.weight, t_out.weight[::2, ::2]) and torch.equal(s_out.bias, t_out.bias[::2])
    assert torch.equal(student.get_submodule(pooler).weight, teacher.get_submodule(pooler).weight[::2, ::2])
    s_words, t_words = student.get_submodule(f"{base}.{words}"), teacher.get_submodule(f"{base}.{words}")
    if kind == "electra-projected":  # the embeddings keep their width; the projection's rows are the kept units
        assert torch.equal(s_words.weight, t_words.weight)
        assert torch.equal(student.electra.embeddings_project.weight, teacher.electra.embeddings_project.weight[::2])
    else:
        assert torch.equal(s_words.weight, t_words.weight[:, ::2])
    if kind == "mpnet":  # the relative attention bias of the kept heads
        assert torch.equal(student.mpnet.encoder.relative_attention_bias.weight,
                           teacher.mpnet.encoder.relative_attention_bias.weight[:, ::2])
    if kind in ("roberta", "xlm-roberta", "mpnet"):  # positions numbered after the padding row: every row kept
        assert torch.equal(student.get_submodule(f"{base}.embeddings.position_embeddings").weight,
                           teacher.get_submodule(f"{base}.embeddings.position_embeddings").weight[:, ::2])
    assert fresh_output and all(map(torch.equal, _output_layer(student), fresh_output))  # the output layer stays fresh
    qa = _student(teacher, question_answering=True, **NARROW)
    select_teacher_weights(qa, teacher)
    assert type(qa).__name__.endswith("ForQuestionAnswering")
    assert torch.equal(qa.get_submodule(f"{base}.{layers}")[0].get_submodule(query).weight, s_query.weight)


@pytest.mark.parametrize("kind", KINDS)
def test_a_one_layer_student_runs_the_teachers_chosen_layer(kind, tiny_tokenizer):
    teacher = _teacher(kind, tiny_tokenizer)
    student = _student(teacher, num_hidden_layers=1)
    assert select_teacher_weights(student, teacher)["teacher_layers"] == [4]  # g(1) = 4 of 4
    base, layers = PATHS[kind][:2]
    last_only = copy.deepcopy(teacher)
    parent, _, name = f"{base}.{layers}".rpartition(".")
    setattr(last_only.get_submodule(parent), name, nn.ModuleList([last_only.get_submodule(f"{base}.{layers}")[3]]))
    ids = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 5, 3, 6, 6, 3, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        ours = student.get_submodule(base)(input_ids=ids, attention_mask=mask).last_hidden_state
        theirs = last_only.get_submodule(base)(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(ours, theirs)  # copied weights, the same inputs in the same batch shape


def test_weights_are_selected_only_within_one_architecture(tiny_tokenizer):
    roberta = _teacher("roberta", tiny_tokenizer)
    with pytest.raises(KdbertError, match=r"needs a student of the teacher's architecture \(roberta\), got bert; "
                                          "use --student-init random"):
        select_teacher_weights(_student(_teacher("bert", tiny_tokenizer), **NARROW), roberta)
    electra = _teacher("electra-projected", tiny_tokenizer)
    with pytest.raises(KdbertError, match="embeddings are projected .* exactly when the teacher's are"):
        select_teacher_weights(_student(electra, hidden_size=16, num_attention_heads=4, intermediate_size=32), electra)
    albert = AlbertForSequenceClassification(AlbertConfig(vocab_size=len(tiny_tokenizer), **TEACHER))
    with pytest.raises(KdbertError, match="cannot cut the weights of a 'albert' teacher"):
        select_teacher_weights(albert, albert)


def _context(config, tokenizer, num_labels=2, question_answering=False) -> ShapeContext:
    return ShapeContext(config, tokenizer, num_labels, False, ("the cat sat",), question_answering=question_answering)


def test_candidates_are_named_after_the_teachers_architecture(tiny_tokenizer):
    wide = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
    roberta = _context(_config("roberta", len(tiny_tokenizer), **wide), tiny_tokenizer)
    names = [c.name for c in speed.all_candidates(roberta)]
    # no MobileBERT: its start is fitted to a BERT teacher's embeddings
    # at the teacher's width (256) also a half, a quarter and an eighth of its FFN (512); at the widest
    # width below it (192), from two layers, half its FFN (192 x 512 / 256 / 2)
    assert names == ["bilstm-h150", "bilstm-h300", *(f"roberta-{d}x{w}" for d in (1, 2) for w in (128, 192, 256)),
                     *(f"roberta-{d}x256-ffn{f}" for d in (1, 2) for f in (256, 128, 64)), "roberta-2x192-ffn192"]
    candidate = speed.all_candidates(roberta)[2]
    model, tokenizer = candidate.build(roberta)
    assert (type(model).__name__, model.config.hidden_size, model.config.num_attention_heads,
            model.config.intermediate_size, model.config.pad_token_id, tokenizer) == (
        "RobertaForSequenceClassification", 128, 2, 256, 0, tiny_tokenizer)
    student = candidate.from_teacher(AutoModelForSequenceClassification.from_config(roberta.teacher_config), roberta)
    assert type(student).__name__ == "RobertaForSequenceClassification"
    regression = _context(roberta.teacher_config, tiny_tokenizer, num_labels=1)
    model, _ = speed.all_candidates(regression)[2].build(regression)
    assert (model.config.num_labels, model.config.problem_type) == (1, "regression")
    qa = _context(roberta.teacher_config, tiny_tokenizer, question_answering=True)
    assert type(speed.all_candidates(qa)[0].build(qa)[0]).__name__ == "RobertaForQuestionAnswering"  # no BiLSTM
    # ELECTRA projecting 128-wide embeddings: no 128-wide student (it would have no projection to take)
    electra = _context(ElectraConfig(vocab_size=len(tiny_tokenizer), embedding_size=128, **wide), tiny_tokenizer)
    names = [c.name for c in speed.all_candidates(electra)]
    assert names[2:] == [*(f"electra-{d}x{w}" for d in (1, 2) for w in (192, 256)),
                         *(f"electra-{d}x256-ffn{f}" for d in (1, 2) for f in (256, 128, 64)), "electra-2x192-ffn192"]
    distilbert = _context(DistilBertConfig(vocab_size=len(tiny_tokenizer), dim=128, n_layers=1, n_heads=2,
                                           hidden_dim=256), tiny_tokenizer)
    candidate = speed.all_candidates(distilbert)[2]
    assert (candidate.name, dict(candidate.shape)["intermediate_size"]) == ("distilbert-1x128", 256)
    assert candidate.build(distilbert)[0].config.hidden_dim == 256


def test_same_architecture_candidates_are_distilled_by_kd_or_tinybert_and_can_be_augmented():
    from kdbert.compress.augment import AugmentSettings
    from kdbert.compress.recipes import SearchSettings, run_options
    from kdbert.families.registry import Candidate

    for name in ("roberta-2x256", "xlmr-2x256", "mpnet-2x256", "electra-2x256", "distilbert-2x256"):
        candidate = Candidate(name, "hf", (), build=None, from_teacher=lambda teacher, context: teacher)
        assert run_options(candidate, 400, SearchSettings(), "cache")["method"] == "kd"
        assert run_options(candidate, 400, SearchSettings(intermediate_share=0.25), "cache")["method"] == "tinybert"
    assert AugmentSettings.parse("roberta,mpnet", None).kinds == ("roberta", "mpnet")


def test_a_teacher_kdbert_cannot_cut_gets_other_candidates_and_a_note(tiny_tokenizer):
    albert = _context(AlbertConfig(vocab_size=len(tiny_tokenizer), hidden_size=128, num_attention_heads=4,
                                   intermediate_size=256), tiny_tokenizer)
    assert [c.name for c in speed.all_candidates(albert)] == ["bilstm-h150", "bilstm-h300"]
    assert speed.candidate_notes(albert) == [
        "no candidates of the teacher's architecture (albert): kdbert cuts the weights of bert, roberta, xlm-roberta, "
        "electra, mpnet, distilbert teachers only; the BiLSTM and --student candidates are still offered"]
    assert speed.candidate_notes(_context(_config("roberta", len(tiny_tokenizer)), tiny_tokenizer)) == []


def test_mpnet_attention_scores_are_traced_with_its_relative_position_bias(tiny_tokenizer):
    from kdbert.core.trace import MASKED_SCORE, trace

    model = _teacher("mpnet", tiny_tokenizer)
    ids = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 5, 3, 6, 6, 3, 0]])
    mask = (ids != 0).long()
    traced = trace(model, {"input_ids": ids, "attention_mask": mask})
    probabilities = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert len(traced.attention_scores) == 4
    for scores, expected in zip(traced.attention_scores, probabilities):
        assert scores.shape == (2, 12, 7, 7)
        torch.testing.assert_close(torch.softmax(scores, dim=-1), expected)  # the model's own probabilities
        assert bool((scores[0, :, :, 5:] < MASKED_SCORE / 2).all())  # padded keys carry the mask


def test_positions_numbered_after_the_padding_row_bound_the_sequence_length(tiny_tokenizer):
    from kdbert.families.hf import HFFamily
    from kdbert.families.registry import example_inputs

    roberta = RobertaForSequenceClassification(_config("roberta", len(tiny_tokenizer))).eval()  # 66 rows, pad 0
    spec = HFFamily().input_spec(roberta)
    assert spec.max_positions == 65  # positions 1..65: roberta-base's 514 rows take 512 tokens
    with torch.no_grad():
        roberta(**example_inputs(spec, 65))
    with pytest.raises(KdbertError, match="seq_len 66 exceeds"):
        example_inputs(spec, 66)
    assert HFFamily().input_spec(_teacher("bert", tiny_tokenizer)).max_positions == 66


def _tiny_task_teacher(root, tokenizer, config):
    """A tiny SST-2 task and a random classifier of ``config`` as its teacher, saved with the rows it held out."""
    write_glue_task(root / "glue", "SST-2", n_train=12, n_dev=8)
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(root / "teacher")
    tokenizer.save_pretrained(root / "teacher")
    task = TaskOptions("sst2", data_dir=str(root / "glue"))
    record_held_out(root / "teacher", task, 0.2)  # 2 of the 12 rows: one picks, one decides
    return ["compress", "--teacher", str(root / "teacher"), "--task", "sst2", "--data-dir", str(root / "glue"),
            "--rounds", "1", "--first-steps", "2", "--batch-size", "4", "--length-rows", "4", "--threads", "1",
            "--target-speedup", "0.01", "--no-progress", "--output-dir", str(root / "out")]


def test_compress_ships_a_roberta_student_distilled_through_its_layers(tmp_path, tiny_tokenizer):
    from kdbert.cli import main

    config = _config("roberta", len(tiny_tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256)
    args = _tiny_task_teacher(tmp_path, tiny_tokenizer, config)
    assert main([*args, "--candidates", "roberta-1x128", "--intermediate-share", "0.5", "--selection", "importance"]) == 0
    out = tmp_path / "out"
    report = json.loads((out / "compress_report.json").read_text())
    assert report["winner"]["candidate"] == "roberta-1x128" and report["candidate_notes"] == []
    assert report["starts"] == {"roberta-1x128": "teacher-weights"}
    start = AutoModelForSequenceClassification.from_pretrained(out / "starts" / "roberta-1x128")
    teacher = AutoModelForSequenceClassification.from_pretrained(tmp_path / "teacher")
    assert type(start).__name__ == "RobertaForSequenceClassification"
    copied = Importance.load(out).layers(1)[0]  # the layer the teacher's ranking on the task left last
    assert torch.equal(start.roberta.encoder.layer[0].attention.self.query.weight,
                       teacher.roberta.encoder.layer[copied].attention.self.query.weight)  # whole at this width
    assert json.loads((out / "starts" / "roberta-1x128" / "student_init.json").read_text())["selection"] == "importance"
    # TinyBERT's intermediate stage matched the teacher's attention scores and hidden states, then its logits
    log = [json.loads(line) for line in (out / "runs" / "roberta-1x128" / "log.jsonl").read_text().splitlines()]
    assert any(row.get("stage") == "intermediate" and "attention" in row for row in log)
    assert (out / "winner" / "model.int8.onnx").is_file()
    assert "RobertaForSequenceClassification" in (out / "winner" / "README.md").read_text()


def test_compress_with_a_teacher_it_cannot_cut_says_why_and_ships_another_candidate(tmp_path, tiny_tokenizer, capsys):
    from kdbert.cli import main

    config = AlbertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, embedding_size=16, max_position_embeddings=66, num_labels=2)
    args = _tiny_task_teacher(tmp_path, tiny_tokenizer, config)
    capsys.readouterr()
    assert main([*args, "--candidates", "bilstm-h150"]) == 0
    report = json.loads((tmp_path / "out" / "compress_report.json").read_text())
    note = report["candidate_notes"][0]
    assert note.startswith("no candidates of the teacher's architecture (albert)")
    assert note in capsys.readouterr().out and note[1:] in (tmp_path / "out" / "compress_report.md").read_text()
    assert report["winner"]["candidate"] == "bilstm-h150"


@pytest.mark.parametrize("kind", KINDS)
def test_with_head_a_student_starts_from_the_teachers_output_layer_on_its_hidden_units(kind, tiny_tokenizer):
    teacher = _teacher(kind, tiny_tokenizer)
    student = _student(teacher, **NARROW)
    assert select_teacher_weights(student, teacher, head=True)["head"] == "the teacher's"
    (s_weight, s_bias), (t_weight, t_bias) = _output_layer(student), _output_layer(teacher)
    assert torch.equal(s_weight, t_weight[:, ::2]) and torch.equal(s_bias, t_bias)  # columns: hidden units 0, 2, ...
    # another task's head (3 labels against the teacher's 2) and a QA student of a classifier keep theirs
    other = AutoModelForSequenceClassification.from_config(task_config(teacher.config, {**TEACHER, **NARROW}, 3))
    fresh = [p.clone() for p in _output_layer(other)]
    assert select_teacher_weights(other, teacher, head=True)["head"] == "fresh"
    assert all(map(torch.equal, _output_layer(other), fresh))
    qa = _student(teacher, question_answering=True, **NARROW)
    assert select_teacher_weights(qa, teacher, head=True)["head"] == "fresh"
