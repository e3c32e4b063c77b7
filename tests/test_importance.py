"""Starts chosen by importance: the Taylor importance of heads, FFN units and hidden units against a
hand computation, their order on a hand-made model, the layer a greedy elimination drops first, and
the weights a student of fewer units then takes; the activation ranking of a pre-trained model's FFN
units."""

import random

import pytest
import torch
from conftest import WORDS, tiny_bert_config
from transformers import BertForSequenceClassification

from kdbert.data.glue import Example
from kdbert.families.importance import (Importance, ffn_activation_importance, layer_elimination, task_importance,
                                        unit_importance)
from kdbert.families.selection import LAYOUTS, select_teacher_weights

LAYOUT = LAYOUTS["bert"]


def rows(n=64, seed=0):
    rng = random.Random(seed)
    return [Example((" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))),), rng.randint(0, 1))
            for _ in range(n)]


@pytest.fixture
def teacher(tiny_tokenizer):
    """A tiny BERT (2 layers, 16 wide, 4 heads, 32 FFN units) with head 2 and FFN units 5 and 9 of
    layer 0 and hidden unit 3 everywhere switched off (their weights zero), and layer 1 made (almost)
    the identity: its attention and FFN write nothing, its LayerNorms renormalise what layer 0's
    already normalised."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, hidden_dropout_prob=0.0,
                                                           attention_probs_dropout_prob=0.0)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():  # layer 0 and the head do real work (init: near identity)
            if name.startswith(("bert.encoder.layer.0.", "classifier", "bert.pooler")) and param.dim() == 2:
                param.mul_(20)
        attention = model.bert.encoder.layer[0].attention
        for linear in (attention.self.query, attention.self.key, attention.self.value):
            linear.weight[8:12] = 0
            linear.bias[8:12] = 0
        attention.output.dense.weight[:, 8:12] = 0
        first = model.bert.encoder.layer[0]
        first.intermediate.dense.weight[[5, 9]] = 0
        first.intermediate.dense.bias[[5, 9]] = 0
        first.output.dense.weight[:, [5, 9]] = 0
        second = model.bert.encoder.layer[1]
        for dense in (second.attention.output.dense, second.output.dense):
            dense.weight.zero_()
            dense.bias.zero_()
        for name, param in model.named_parameters():  # hidden unit 3: nothing reads or writes it
            if param.dim() == 2 and param.shape[1] == 16 and "classifier" not in name:
                param[:, 3] = 0
            if param.shape[0] == 16:
                param[3] = 0
    return model


def test_unit_importance_is_the_squared_taylor_sum_of_each_group(teacher, tiny_tokenizer):
    """One batch: I of FFN unit 7 of layer 0 is (sum of w * dL/dw over its row of the FFN input with
    its bias and its column of the FFN output)^2, computed here by autograd directly."""
    batch = rows(32)
    heads, ffn, hidden = unit_importance(teacher, LAYOUT, batch, tiny_tokenizer, 16)
    inputs = tiny_tokenizer([r.texts[0] for r in batch], padding=True, return_tensors="pt")
    loss = torch.nn.functional.cross_entropy(teacher(**inputs).logits, torch.tensor([r.label for r in batch]))
    layer = teacher.bert.encoder.layer[0]
    w_in, b_in, w_out = layer.intermediate.dense.weight, layer.intermediate.dense.bias, layer.output.dense.weight
    g_in, gb_in, g_out = torch.autograd.grad(loss, [w_in, b_in, w_out])
    by_hand = ((w_in[7] * g_in[7]).sum() + b_in[7] * gb_in[7] + (w_out[:, 7] * g_out[:, 7]).sum()) ** 2
    assert ffn[0, 7].item() == pytest.approx(by_hand.item(), rel=1e-4)
    assert heads.shape == (2, 4) and ffn.shape == (2, 32) and hidden.shape == (16,)


def test_switched_off_units_rank_last_and_the_identity_layer_is_dropped_first(teacher, tiny_tokenizer):
    ranked = task_importance(teacher, LAYOUT, rows(), tiny_tokenizer, 16)
    assert ranked.heads[0, 2] == 0 and ranked.heads[0].argsort()[0] == 2
    assert set(ranked.ffn[0].argsort()[:2].tolist()) == {5, 9} and ranked.hidden.argmin() == 3
    assert (ranked.heads[1] == 0).all()  # layer 1 writes nothing: none of its heads matters
    assert (ranked.heads[0, [0, 1, 3]] > 0).all() and (ranked.hidden > 0).sum() == 15
    assert ranked.dropped == [1] and ranked.layers(1) == [0] and ranked.layers(2) == [0, 1]
    assert layer_elimination(teacher, LAYOUT, rows(16), tiny_tokenizer, 16) == [1]
    assert all(p.requires_grad for p in teacher.parameters()) and all(p.grad is None for p in teacher.parameters())


def test_a_student_takes_the_most_important_units_and_the_layers_left(teacher, tiny_tokenizer, tmp_path):
    """Hand-made ranking: hidden units 0-7 least important (student keeps 8-15), heads 1 and 3 of
    layer 1, FFN units 16-31 of layer 1, and layer 0 dropped first (a 1-layer student copies layer 1)."""
    ranking = Importance(heads=torch.tensor([[4.0, 3, 2, 1], [1, 5, 0, 6]]), ffn=torch.arange(64.0).view(2, 32),
                         hidden=torch.arange(16.0), dropped=[0])
    student = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, num_hidden_layers=1, hidden_size=8,
                                                             num_attention_heads=2, intermediate_size=16))
    picked = select_teacher_weights(student, teacher, ranking)
    assert picked["selection"] == "importance" and picked["teacher_layers"] == [2]
    hidden, t_layer, s_layer = torch.arange(8, 16), teacher.bert.encoder.layer[1], student.bert.encoder.layer[0]
    attention = torch.tensor([4, 5, 6, 7, 12, 13, 14, 15])  # heads 1 and 3, 4 dims each
    assert torch.equal(s_layer.attention.self.query.weight, t_layer.attention.self.query.weight[attention][:, hidden])
    assert torch.equal(s_layer.intermediate.dense.weight, t_layer.intermediate.dense.weight[16:][:, hidden])
    assert torch.equal(student.bert.embeddings.word_embeddings.weight,
                       teacher.bert.embeddings.word_embeddings.weight[:, hidden])
    evenly = BertForSequenceClassification(student.config)
    assert select_teacher_weights(evenly, teacher)["selection"] == "evenly spaced"
    assert not torch.equal(evenly.bert.embeddings.word_embeddings.weight, student.bert.embeddings.word_embeddings.weight)


def test_the_ranking_is_saved_and_read_back(tmp_path):
    ranking = Importance(torch.rand(3, 2), torch.rand(3, 8), torch.rand(4), dropped=[2, 0])
    ranking.save(tmp_path)
    again = Importance.load(tmp_path)
    assert torch.equal(again.heads, ranking.heads) and again.dropped == [2, 0] and again.layers(2) == [0, 1]
    assert Importance.load(tmp_path / "missing") is None and not list(tmp_path.glob("*.tmp"))


def test_a_time_limit_sums_fewer_batches_and_ranks_the_layers_more_cheaply(teacher, tiny_tokenizer, monkeypatch):
    """A clock that moves 3 s a reading: each batch of the Taylor sums takes 3 s, a forward 1 s, so
    the 2-layer teacher's greedy elimination (GREEDY_PASSES[2] = 1 pass of 2 batches) costs 2 s.
    20 s: both batches (3 + 3 + 3 <= 10), 5 s left: greedy. 1 s: one batch (3 + 3 > 0.5), none left:
    the layers unranked (the uniform map)."""
    from kdbert.families import importance

    clock = iter(range(0, 10_000, 3))
    monkeypatch.setattr(importance.time, "perf_counter", lambda: float(next(clock)))
    assert importance.GREEDY_PASSES[2] == 1.0 and importance.GREEDY_PASSES[12] == pytest.approx(572 / 12)
    ranked = task_importance(teacher, LAYOUT, rows(), tiny_tokenizer, 16, seconds=20.0)
    assert (ranked.layer_rule, ranked.dropped) == ("greedy elimination", [1])
    one_batch = task_importance(teacher, LAYOUT, rows(), tiny_tokenizer, 16, seconds=1.0)
    assert (one_batch.layer_rule, one_batch.dropped, one_batch.layers(1)) == ("uniform", [], [1])  # ceil(1 * 2 / 1)
    assert one_batch.hidden.argmin() == 3 and (one_batch.hidden <= ranked.hidden).all()  # a sum of fewer squares
    assert not torch.equal(one_batch.hidden, ranked.hidden)
    # each layer dropped alone: the same order here, the least moving first
    assert layer_elimination(teacher, LAYOUT, rows(16), tiny_tokenizer, 16, greedy=False) == [1]


def pair_rows(n=32, seed=1):
    rng = random.Random(seed)
    return [Example(tuple(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(2)),
                    float(i % 4)) for i in range(n)]


def test_pair_pooled_students_keep_the_layers_whose_cosine_follows_the_labels(tiny_tokenizer, monkeypatch):
    """Layers ranked for students that read a pair's cosine: a stand-in cosine follows the labels
    exactly with layer 1 alone and each other layer kept adds noise, so the elimination drops 2 (tied
    with 0: the higher goes), then 0, keeping 1, whatever the joint reading's elimination would keep."""
    from kdbert.families import importance

    model = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, num_hidden_layers=3, num_labels=1)).eval()
    layers = list(model.bert.encoder.layer)
    data = pair_rows()
    labels = torch.tensor([row.label for row in data])
    noise = torch.tensor([(-1.0) ** i * (i % 3) for i in range(len(data))])

    def cosines(model, batches):
        kept = [layers.index(layer) for layer in model.bert.encoder.layer]
        return labels + noise * sum(index != 1 for index in kept)

    monkeypatch.setattr(importance, "_pair_cosines", cosines)
    assert importance.pair_layer_elimination(model, LAYOUT, data, tiny_tokenizer, 16) == [2, 0]
    ranked = task_importance(model, LAYOUT, data, tiny_tokenizer, 16, pairs_apart=True)
    assert (ranked.dropped, ranked.layer_rule, ranked.layers(1)) == ([2, 0], "pair cosine elimination", [1])


def test_a_pairs_cosine_is_the_cosine_of_its_two_sentences_masked_means(tiny_tokenizer):
    from torch.nn import functional as F

    from kdbert.families.importance import _pair_batches, _pair_cosines

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, num_labels=1)).eval()
    data = pair_rows(3)
    with torch.no_grad():
        got = _pair_cosines(model, _pair_batches(model, tiny_tokenizer, data, 16))
        means = []
        for row in data:  # each sentence alone: no padding to mask
            pair = [model.bert(**tiny_tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(0)
                    for text in row.texts]
            means.append(F.cosine_similarity(*pair, dim=0))
    assert torch.allclose(got, torch.stack(means), atol=1e-5)


def test_ffn_activation_importance_is_the_mean_absolute_activation_times_the_output_column_norm(teacher,
                                                                                               tiny_tokenizer):
    """A_lj = mean over real tokens of |a_lj| * ||W_out[:, j]||, the texts encoded one by one here (no
    padding) against padded batches there; layer 0's switched-off units 5 and 9 write nothing."""
    texts = [row.texts[0] for row in rows(40)]
    captured = []
    hooks = [layer.intermediate.register_forward_hook(lambda _m, _i, out: captured.append(out[0]))
             for layer in teacher.bert.encoder.layer]
    with torch.no_grad():
        sums, tokens = torch.zeros(2, 32), 0
        for text in texts:
            captured.clear()
            teacher.bert(**tiny_tokenizer(text, return_tensors="pt"))
            sums += torch.stack([out.abs().sum(0) for out in captured])
            tokens += captured[0].shape[0]
    for hook in hooks:
        hook.remove()
    norms = torch.stack([layer.output.dense.weight.norm(dim=0) for layer in teacher.bert.encoder.layer])
    expected = sums / tokens * norms
    found = ffn_activation_importance(teacher, LAYOUT, tiny_tokenizer, texts)
    assert torch.allclose(found, expected, rtol=1e-5, atol=1e-7)
    assert set(found[0].argsort()[:2].tolist()) == {5, 9} and found[0, [5, 9]].abs().max() == 0

