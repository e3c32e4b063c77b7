"""Tests for kdbert.deploy.bench on tiny random models (no downloads, a few timed runs only)."""

import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
)

from kdbert.deploy.bench import (
    bench_model,
    compare,
    count_flops,
    count_parameters,
    format_table,
    measure_latency,
    measure_throughput,
)
from kdbert.errors import KdbertError
from kdbert.families.registry import count_matmul_flops, example_inputs, family_of_model

V, P, T, H, I, C = 120, 64, 2, 32, 64, 3  # vocab, positions, token types, hidden, FFN, labels


def tiny_bert(layers=2, hidden=H, intermediate=I, attn="sdpa"):
    config = BertConfig(
        vocab_size=V, max_position_embeddings=P, type_vocab_size=T, hidden_size=hidden,
        num_hidden_layers=layers, num_attention_heads=4, intermediate_size=intermediate,
        num_labels=C, attn_implementation=attn,
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(config)


def tiny_distilbert():
    config = DistilBertConfig(
        vocab_size=V, max_position_embeddings=P, dim=H, n_layers=2, n_heads=4,
        hidden_dim=I, num_labels=C,
    )
    torch.manual_seed(0)
    return DistilBertForSequenceClassification(config)


def bert_param_formula(N, V=V, P=P, T=T, H=H, I=I, C=C):
    embeddings = (V + P + T) * H + 2 * H                   # three matrices + LayerNorm
    layer = (
        4 * (H * H + H)                                    # Q, K, V, attention output
        + 2 * H                                            # attention LayerNorm
        + (H * I + I) + (I * H + H)                        # FFN in and out
        + 2 * H                                            # output LayerNorm
    )
    head = (H * H + H) + (H * C + C)                       # pooler + classifier
    return embeddings + N * layer + head


def bert_flops_formula(N, L, H=H, I=I, C=C):
    linears = L * (4 * 2 * H * H + 2 * 2 * H * I)          # 2*in*out per token per Linear
    attention = 2 * 2 * L * L * H                          # Q @ K^T and scores @ V
    head = 2 * H * H + 2 * H * C                           # pooler + classifier on [CLS]
    return N * (linears + attention) + head


# ------------------------------------------------------------------ parameters


def test_parameter_counts_match_hand_formula():
    counts = count_parameters(tiny_bert(layers=2))
    assert counts["total"] == bert_param_formula(2)
    assert counts["non_embedding"] == bert_param_formula(2) - (V + P + T) * H


def test_non_embedding_excludes_exactly_the_embedding_matrices():
    model = tiny_bert()
    emb = model.bert.embeddings
    matrices = [emb.word_embeddings.weight, emb.position_embeddings.weight, emb.token_type_embeddings.weight]
    rest = sum(p.numel() for p in model.parameters() if all(p is not m for m in matrices))
    assert count_parameters(model)["non_embedding"] == rest


def test_parameter_counts_distilbert():
    model = tiny_distilbert()
    counts = count_parameters(model)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["non_embedding"] == (V + P) * H  # no token-type embeddings


# ------------------------------------------------------------------ FLOPs


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_flops_match_hand_formula(attn):
    flops = count_flops(tiny_bert(layers=2, attn=attn), seq_len=16)
    expected = bert_flops_formula(2, 16)
    assert flops > 0
    assert abs(flops - expected) / expected < 0.10


def test_flops_scale_linearly_with_layers():
    # Big hidden, short sequence: the per-layer cost dwarfs the pooler/classifier head.
    two = count_flops(tiny_bert(layers=2, hidden=128, intermediate=512), seq_len=16)
    four = count_flops(tiny_bert(layers=4, hidden=128, intermediate=512), seq_len=16)
    assert 1.7 <= four / two <= 2.1


def test_flops_are_per_example_and_work_for_distilbert():
    model = tiny_distilbert()
    spec = family_of_model(model).input_spec(model)
    assert count_matmul_flops(model, example_inputs(spec, 8, batch_size=3)) == 3 * count_flops(model, 8)
    assert count_flops(model, 8) > 0


def test_flops_reject_too_long_sequence():
    with pytest.raises(KdbertError, match="max_position_embeddings"):
        count_flops(tiny_bert(), seq_len=P + 1)


# ------------------------------------------------------------------ speed


def test_latency_dict_is_sane_and_threads_restored():
    model = tiny_bert()
    model.train()
    before = torch.get_num_threads()
    latency = measure_latency(model, seq_len=8, warmup=1, runs=5, threads=1)
    assert 0 < latency["min_ms"] <= latency["median_ms"] <= latency["p90_ms"]
    assert latency["threads"] == 1 and latency["runs"] == 5
    assert torch.get_num_threads() == before
    assert model.training  # mode restored


def test_throughput_positive():
    assert measure_throughput(tiny_bert(), seq_len=8, batch_size=4, warmup=1, runs=2) > 0


# ------------------------------------------------------------------ bench / compare / table


def test_bench_model_from_saved_folder(tmp_path):
    tiny_bert().save_pretrained(tmp_path / "student")
    row = bench_model(tmp_path / "student", seq_len=8, runs=2, warmup=1, throughput_batch_size=4)
    assert row["name"] == "student"
    assert row["params_total"] == bert_param_formula(2)
    assert row["flops_per_example"] == count_flops(tiny_bert(), 8)
    assert 0 < row["latency_median_ms"] <= row["latency_p90_ms"]
    assert row["throughput"] > 0
    assert row["seq_len"] == 8 and row["threads"] >= 1 and row["torch"] == torch.__version__


def test_missing_path_raises(tmp_path):
    with pytest.raises(KdbertError, match="does not exist; pass a folder saved with save_pretrained"):
        bench_model(tmp_path / "nope", seq_len=8, runs=1)


def test_compare_against_itself_and_table():
    row = bench_model(tiny_bert(), seq_len=8, runs=2, warmup=1, name="teacher", throughput_batch_size=4)
    small = dict(row, name="student", latency_median_ms=row["latency_median_ms"] / 2,
                 params_total=row["params_total"] // 2, flops_per_example=row["flops_per_example"] // 4)
    rows = compare([row, small])
    assert rows[0]["speedup"] == 1.0 and rows[0]["size_ratio"] == 1.0 and rows[0]["flops_ratio"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(2.0)
    assert rows[1]["flops_ratio"] == pytest.approx(0.25, rel=0.01)
    assert "speedup" not in row  # input rows untouched
    table = format_table(rows).splitlines()
    assert len(table) == 4 and table[0].startswith("| Model") and "Speedup" in table[0]
    assert set(table[1]) <= set("|-: ") and "2.00x" in table[3]
    assert len({len(line) for line in table}) == 1  # fixed width


def test_compare_bad_input():
    with pytest.raises(KdbertError, match="baseline_index"):
        compare([{"latency_median_ms": 1.0, "params_total": 1, "flops_per_example": 1}], baseline_index=3)
    with pytest.raises(KdbertError, match="latency_median_ms"):
        compare([{"name": "x"}])
