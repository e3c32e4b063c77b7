"""Student families: a new family plugs in by registering one object, and every deployment
command (export, bench, evaluate) then handles its models without any core module changing."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch
from conftest import write_glue_task
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import BertTokenizerFast

from kdbert.cli import main
from kdbert.core.evaluate import TaskEvaluator
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.trace import HookAdapter
from kdbert.core.stages import Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import load_glue_dir
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.families import registry
from kdbert.families.registry import Family, InputSpec, family_of_folder, family_of_model, register_family

MODEL_TYPE = "toy-bag-of-words"
DIM, LABELS = 8, 2


@dataclass
class BagOfWordsConfig:
    vocab_size: int
    num_labels: int = LABELS
    dim: int = DIM
    model_type: str = MODEL_TYPE


class BagOfWords(nn.Module):
    """logits = W mean_{t: mask_t = 1} E[ids_t] + b: word vectors (V, dim), a linear classifier."""

    def __init__(self, config: BagOfWordsConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()
        mean = (self.embedding(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.classifier(mean)

    def save_pretrained(self, folder) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text(json.dumps(asdict(self.config)))
        save_file(self.state_dict(), str(Path(folder) / "model.safetensors"))


class BagOfWordsFamily(Family):
    """The whole family: recognise, trace, load, build from config, inputs, evaluation."""

    name = MODEL_TYPE
    model_classes = (BagOfWords,)

    def recognises(self, folder: Path) -> bool:
        config = folder / "config.json"
        return config.is_file() and json.loads(config.read_text()).get("model_type") == MODEL_TYPE

    def trace_adapter(self):
        return HookAdapter({})  # matches read its logits

    def from_config(self, folder: Path) -> BagOfWords:
        return BagOfWords(BagOfWordsConfig(**json.loads((folder / "config.json").read_text())))

    def load(self, folder: Path, task=None):
        model = self.from_config(folder)
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        if task is not None:
            self.check_fits(str(folder), model.config.num_labels, False, task)
        return model.eval(), self.load_encoder(folder)

    def load_encoder(self, folder: Path):
        return BertTokenizerFast.from_pretrained(str(folder))

    def input_spec(self, model: nn.Module) -> InputSpec:
        return InputSpec(("input_ids", "attention_mask"), None, model.config.vocab_size)

    def evaluator(self, data, encoder, max_seq_len, batch_size):
        return TaskEvaluator(data, encoder, max_seq_len, batch_size)


@pytest.fixture
def toy_family(monkeypatch):
    monkeypatch.setattr(registry, "_registered", [])  # the registration ends with the test
    return register_family(BagOfWordsFamily())


def test_a_registered_toy_family_trains_exports_benches_and_evaluates(toy_family, tmp_path, tiny_tokenizer, capsys):
    glue = tmp_path / "glue"
    write_glue_task(glue, "SST-2", n_train=16, n_dev=12)
    spec = GLUE_TASKS["sst2"]
    data = load_glue_dir(spec, glue)

    # build, and train one step through the one trainer
    torch.manual_seed(0)
    model = BagOfWords(BagOfWordsConfig(vocab_size=len(tiny_tokenizer)))
    before = model.classifier.weight.detach().clone()
    stage = Stage(StageConfig("labels", max_steps=1, batch_size=8, evaluate=False),
                  MatchLoss([Match("hard", "logits", "hard_label", 1.0, target="labels")]),
                  encode_examples(tiny_tokenizer, data.train, 32))
    Trainer({"student": model}, [stage], RunConfig(str(tmp_path / "train"), progress=False, log_every=1),
            PaddingCollator(tiny_tokenizer.pad_token_id)).train()
    assert not torch.equal(before, model.classifier.weight)
    folder = tmp_path / "student"
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    assert family_of_folder(folder) is toy_family and family_of_model(model) is toy_family

    # export (fp32 + int8, checked on dev), then evaluate both sides through the CLI
    glue_args = ["--task", "sst2", "--data-dir", str(glue)]
    assert main(["export", "--model", str(folder), "--quantize", "int8", *glue_args]) == 0
    report = json.loads((folder / "onnx" / "export_report.json").read_text())
    assert report["family"] == "BagOfWords" and report["inputs"] == ["input_ids", "attention_mask"]
    assert report["parity"]["max_abs_logit_diff_fp32"] < 1e-5
    assert report["params_total"] == len(tiny_tokenizer) * DIM + DIM * LABELS + LABELS
    # FlopCounterMode counts the classifier's matrix product only: 2 * dim * labels per example
    assert report["flops_per_example"]["16"] == 2 * DIM * LABELS
    assert main(["evaluate", "--model", str(folder), *glue_args]) == 0
    assert json.loads((folder / "eval_sst2.json").read_text()) == report["dev_metrics"]["pytorch"]
    assert main(["evaluate", "--model", str(folder / "onnx"), *glue_args]) == 0
    assert json.loads((folder / "onnx" / "eval_sst2_model.json").read_text()) == report["dev_metrics"]["onnx_fp32"]

    # bench, PyTorch and the int8 export, compared
    rows_file = tmp_path / "bench.json"
    assert main(["bench", "--model", str(folder / "onnx" / "model.int8.onnx"), "--compare", str(folder),
                 "--seq-len", "16", "--runs", "2", "--output", str(rows_file)]) == 0
    pytorch, int8 = json.loads(rows_file.read_text())
    assert (pytorch["runtime"], int8["runtime"]) == ("pytorch fp32", "onnxruntime int8")
    assert pytorch["flops_per_example"] == int8["flops_per_example"] == 2 * DIM * LABELS
    assert pytorch["params_total"] == int8["params_total"] == report["params_total"]


def test_the_family_refuses_a_task_with_another_label_count(toy_family, tmp_path, tiny_tokenizer, capsys):
    write_glue_task(tmp_path / "glue", "STS-B", n_train=8, n_dev=8)
    folder = tmp_path / "student"
    BagOfWords(BagOfWordsConfig(vocab_size=len(tiny_tokenizer))).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    assert main(["evaluate", "--model", str(folder), "--task", "stsb", "--data-dir", str(tmp_path / "glue")]) == 2
    assert f"{folder} has 2 output(s) but stsb needs 1; use a model fine-tuned on this task" in capsys.readouterr().err


def test_register_family_refuses_what_is_not_a_family():
    with pytest.raises(KdbertError, match="register_family expects a kdbert.families.registry.Family, got dict"):
        register_family({"name": "toy"})
