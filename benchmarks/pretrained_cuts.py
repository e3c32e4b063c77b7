"""Which layers a cut of the packaged all-MiniLM-L6-v2 should keep (``pretrained-minilm-l4``/``-l3``,
:func:`kdbert.families.selection.ends_and_between`): each cut's sentence similarity before any training.

    OMP_NUM_THREADS=1 python benchmarks/pretrained_cuts.py
    OMP_NUM_THREADS=1 python benchmarks/pretrained_cuts.py --cuts 0,2,5 1,3,5
    OMP_NUM_THREADS=1 python benchmarks/pretrained_cuts.py --cuts 0,1,2,3,4,5 0,1,3,4,5 0,2,3,5 --ffn 1024 768

For each cut (its 0-based layers, in order), STS-B dev: each sentence encoded alone by the cut model,
mean-pooled over its tokens as all-MiniLM-L6-v2 was trained, and the cosine of the two vectors
scored against the gold similarity (Pearson and Spearman, x100). The whole model is the first row.
With ``--ffn``, each cut is scored again with each of its layers' feed-forward blocks narrowed to that
many units, evenly spaced (:func:`kdbert.families.selection.select_teacher_weights`, as kdbert narrows
a student it builds from a teacher): a narrower model against a shallower one of the same size.
Records each cut in ``results/pretrained_cuts.json`` under ``stsb/<layers>`` (``/ffn<units>``), with
its encoder's parameter count.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import cpu_model, machine_info, save_result
from paths import GLUE_DIR
from scipy.stats import pearsonr, spearmanr
from transformers import AutoConfig, AutoModel, AutoTokenizer

from kdbert.core.loading import default_model_path
from kdbert.data.load import TaskOptions, load_task
from kdbert.families.selection import _selection_layers, ends_and_between, select_teacher_weights

BATCH = 128


def default_cuts(total: int) -> list[tuple[int, ...]]:
    """The whole model, then per depth 4, 3, 2 the cut kdbert keeps and the uniform map (ceil(m*N/M) - 1),
    and a few others that keep the last layer."""
    cuts = [tuple(range(total))]
    for depth in (4, 3, 2):
        cuts += [tuple(ends_and_between(depth, total)), tuple(_selection_layers(depth, total))]
    cuts += [(0, 1, 4, 5), (2, 3, 4, 5), (0, 2, 4, 5), (0, 1, 5), (3, 4, 5), (2, 4, 5), (0, 2, 4), (1, 5), (4, 5)]
    return list(dict.fromkeys(cuts))


@torch.no_grad()
def sentence_vectors(model, tokenizer, texts: list[str]) -> torch.Tensor:
    """Masked mean of the last hidden states, one row per text: (len(texts), hidden)."""
    out = []
    for start in range(0, len(texts), BATCH):
        batch = tokenizer(texts[start:start + BATCH], padding=True, truncation=True, max_length=128,
                          return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        out.append((hidden * mask).sum(1) / mask.sum(1))
    return torch.cat(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", nargs="*", help="cuts to score, each its 0-based layers joined by commas "
                                                  "(default: the whole model, kdbert's cuts and others)")
    parser.add_argument("--ffn", nargs="*", type=int, default=[],
                        help="also score each cut with its feed-forward blocks narrowed to these widths")
    args = parser.parse_args(argv)
    path = default_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    full = AutoModel.from_pretrained(path).eval()  # the teacher of the narrowed models, never cut
    layers = model.encoder.layer
    cuts = ([tuple(int(i) for i in cut.split(",")) for cut in args.cuts] if args.cuts
            else default_cuts(len(layers)))
    dev = load_task(TaskOptions("stsb", data_dir=str(GLUE_DIR))).dev["dev"]
    first, second = [row.texts[0] for row in dev], [row.texts[1] for row in dev]
    gold = [float(row.label) for row in dev]
    command = ("OMP_NUM_THREADS=1 python benchmarks/pretrained_cuts.py" + (f" --cuts {' '.join(args.cuts)}"
                                                                          if args.cuts else "")
               + (f" --ffn {' '.join(map(str, args.ffn))}" if args.ffn else ""))
    for cut, width in [(cut, width) for cut in cuts for width in (None, *args.ffn)]:
        started = time.perf_counter()
        if width is None:
            model.encoder.layer = torch.nn.ModuleList(layers[i] for i in cut)
            scored = model
        else:
            config = AutoConfig.from_pretrained(path, num_hidden_layers=len(cut), intermediate_size=width)
            scored = AutoModel.from_config(config).eval()
            select_teacher_weights(scored, full, layers=list(cut))
        cosine = torch.nn.functional.cosine_similarity(sentence_vectors(scored, tokenizer, first),
                                                       sentence_vectors(scored, tokenizer, second)).numpy()
        result = {"layers": list(cut), "total_layers": len(layers), "dev_rows": len(dev),
                  "ffn": scored.config.intermediate_size,
                  "encoder_parameters": sum(p.numel() for p in scored.encoder.parameters()),
                  "pearson": 100 * float(pearsonr(cosine, gold)[0]), "spearman": 100 * float(spearmanr(cosine, gold)[0]),
                  "kdbert_cut": list(cut) == ends_and_between(len(cut), len(layers)),
                  "seconds": time.perf_counter() - started, "command": command, "cpu": cpu_model(), **machine_info()}
        save_result("pretrained_cuts", "stsb/" + ",".join(map(str, cut)) + (f"/ffn{width}" if width else ""), result)
        print(f"layers {cut}, ffn {result['ffn']}: pearson {result['pearson']:.2f}, spearman {result['spearman']:.2f}", flush=True)


if __name__ == "__main__":
    main()
