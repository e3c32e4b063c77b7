"""Questions and contexts cut into the windows a QA model reads (BERT's SQuAD recipe).

A question longer than ``MAX_QUESTION_TOKENS`` is cut to them; the context is split into windows of
at most ``max_seq_len`` tokens (``[CLS] question [SEP] context piece [SEP]``) that share
``doc_stride`` tokens. A window's row carries the model inputs and:

    labels    [start, end]  token positions of the first gold answer when it lies wholly in the
                            window, else [0, 0] (the [CLS] token: "not in this window")
    example   int           the question's index in the list encoded
    offsets   [(a, b) | None] per token: the context characters it covers, None outside the context

so :mod:`kdbert.core.qa_evaluate` maps predicted spans back to the context's text.
"""

from __future__ import annotations

from kdbert.data.glue import Example
from kdbert.errors import KdbertError

MAX_QUESTION_TOKENS = 64


def _cut_questions(tokenizer, questions: list[str]) -> list[str]:
    """Each question cut to its first :data:`MAX_QUESTION_TOKENS` tokens (by character offsets)."""
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return [q if len(offsets) <= MAX_QUESTION_TOKENS else q[: offsets[MAX_QUESTION_TOKENS - 1][1]]
            for q, offsets in zip(questions, encoded["offset_mapping"])]


def encode_qa(tokenizer, examples: list[Example], max_seq_len: int, doc_stride: int) -> list[dict]:
    """Window rows of ``examples`` (see the module docstring), in example order."""
    if not getattr(tokenizer, "is_fast", True):
        raise KdbertError("question answering needs a fast (Rust) tokenizer for character offsets; load the "
                          "model's tokenizer.json")
    if not examples:
        return []
    questions = _cut_questions(tokenizer, [ex.texts[0] for ex in examples])
    longest = max(len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"])
    check_stride(doc_stride, max_seq_len - tokenizer.num_special_tokens_to_add(pair=True) - longest, max_seq_len,
                 f" beside a question of {longest} tokens")
    encoded = tokenizer(questions, [ex.texts[1] for ex in examples], truncation="only_second",
                        max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True,
                        return_offsets_mapping=True)
    rows = []
    for w, index in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence = encoded.sequence_ids(w)
        offsets = [tuple(o) if s == 1 else None for o, s in zip(encoded["offset_mapping"][w], sequence)]
        row = {key: encoded[key][w] for key in ("input_ids", "token_type_ids", "attention_mask") if key in encoded}
        row.update(example=index, offsets=offsets, labels=answer_positions(examples[index].label, offsets))
        rows.append(row)
    return rows


def check_stride(doc_stride: int, room: int, max_seq_len: int, beside: str = "") -> None:
    """Refuse windows that cannot move on: ``doc_stride`` shared tokens must be fewer than the
    ``room`` each window has for text (the tokenizer would panic)."""
    if room < 1:
        raise KdbertError(f"--max-seq-len {max_seq_len} leaves no room for text{beside}; raise --max-seq-len")
    if doc_stride >= room:
        raise KdbertError(f"--doc-stride {doc_stride} does not fit windows of --max-seq-len {max_seq_len}{beside}: "
                          f"they hold {room} text tokens, so share at most {room - 1}; lower --doc-stride")


def answer_positions(answers, offsets: list) -> list[int]:
    """``[start, end]`` token positions of the first answer in a window whose tokens cover the context
    characters ``offsets`` (None outside the context); ``[0, 0]`` when it is not wholly inside."""
    if not answers:
        return [0, 0]
    text, first = answers[0]
    last = first + len(text)  # one past the answer's last character
    inside = [i for i, o in enumerate(offsets) if o is not None]
    if not inside or offsets[inside[0]][0] > first or offsets[inside[-1]][1] < last:
        return [0, 0]
    start = next(i for i in inside if offsets[i][1] > first)
    end = next(i for i in reversed(inside) if offsets[i][0] < last)
    return [start, end]
