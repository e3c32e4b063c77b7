"""Saving modules whose RNN weights are packed into one buffer, as cuDNN packs them on CUDA."""

import pytest
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from kdbert.core.checkpoints import save_modules


def packed_lstm() -> nn.Module:
    """A module holding a bidirectional LSTM whose weights are views into one flat buffer (what
    ``flatten_parameters`` makes of them on CUDA), built on the CPU."""
    torch.manual_seed(0)
    module = nn.ModuleDict({"lstm": nn.LSTM(3, 4, bidirectional=True), "fc": nn.Linear(8, 2)})
    weights = list(module["lstm"].parameters(recurse=False))
    flat = torch.cat([w.detach().reshape(-1) for w in weights])
    offset = 0
    for w in weights:
        w.data = flat[offset:offset + w.numel()].view_as(w)
        offset += w.numel()
    return module


def test_packed_rnn_weights_are_saved_and_load_back_equal(tmp_path):
    module = packed_lstm()
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        save_model(module, str(tmp_path / "plain.safetensors"))  # what the trainer hit on CUDA
    lstm_weights = list(module["lstm"].parameters(recurse=False))
    expected = {name: value.clone() for name, value in module.state_dict().items()}

    save_modules(module, tmp_path / "modules.safetensors")

    assert all(a is b for a, b in zip(module["lstm"].parameters(recurse=False), lstm_weights))  # the optimiser's
    fresh = nn.ModuleDict({"lstm": nn.LSTM(3, 4, bidirectional=True), "fc": nn.Linear(8, 2)})
    load_model(fresh, str(tmp_path / "modules.safetensors"))
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, expected[name]), name
