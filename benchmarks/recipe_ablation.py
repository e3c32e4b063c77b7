"""The recipe of `kdbert compress`'s candidates, one part at a time, at equal steps and several seeds.

    OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION=bf16 python benchmarks/recipe_ablation.py --task stsb \
        --candidate bert-3x256 --variants search ema annealed --seeds 42 43 44 --steps 1200

Each run is one candidate built from the teacher as the search builds it (weight selection), or a
BiLSTM (``--candidate bilstm-h300``: its own vocabulary and ``--word-vectors``, as the search's),
distilled with the search's options for its kind (the schedule set for the search's horizon, its
warm-up, its batch size and rate), on the held-out rows the teacher's ``kdbert finetune`` recorded
(half pick the checkpoint, half decide, as in the search), for ``--steps`` steps, evaluated at half
and at the end (or every ``--eval-every`` steps), the best on the picking rows kept. A variant changes one part of the recipe
(:data:`VARIANTS`). The teacher is ``runs/teacher-<task>`` (``teacher_best.py``). Runs go to
``<runs-dir>/<task>/<candidate>/<variant>[-<rows added>]/seed<seed>-steps<steps>`` (a finished run is
reused, its checkpoints removed); scores to
``benchmarks/results/recipe_ablation.json`` under ``<task>/<candidate>/<steps>/<variant>/seed<seed>``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import SimpleNamespace

from common import load_results, machine_info, save_result
from wiki_transfer import mined_pairs, perturbed_sentences_like, sentences_like
from paths import GLUE_DIR, IMDB_DIR, NLTK_DATA, run_folder

from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from kdbert.compress.augment import AugmentSettings, write_augmented_rows
from kdbert.compress.build import build_from_teacher
from kdbert.compress.options import CompressConfig
from kdbert.compress.transfer import sentences
from kdbert.core.teacher_logits import shared_store_folder
from kdbert.data.imdb import read_reviews
from kdbert.compress.pipeline import pretrained_students
from kdbert.compress.recipes import SearchSettings, reads_stored_logits, run_options, starts_from_teacher
from kdbert.compress.schedule import horizon
from kdbert.compress.speed import all_candidates, shape_context
from kdbert.compress.start_pooling import reads_pairs_apart
from kdbert.compress.teacher import held_out_task
from kdbert.core.pooling import POOLING_KEY, pooling_of
from kdbert.data.held_out import DECIDE_SHARE
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.families.importance import task_importance
from kdbert.families.registry import family_of_folder
from kdbert.families.selection import layout_of, top
from kdbert.methods.front import distill_task

FIRST_16K = {"max_train_examples": 16000, "train_subset": "first"}  # the main job's rows until 2026-12-02

VARIANTS = {
    "search": {},  # today's recipe: the search's options as they are
    "schedule-free": {"schedule_free": True},
    "schedule-free-lr3e-4": {"schedule_free": True, "learning_rate": 3e-4},
    "annealed": "annealed",  # a linear decay that ends at --steps (what no search can know), the trained weights scored
    "constant": {"ema_decay": None},  # the search's rate (near its peak throughout), the trained weights scored
    "ema": {"ema_decay": 0.998},  # ... the weights' moving average scored (the search's default since 2026-11-29)
    "regression-teacher": {"regression_target": "teacher"},
    "even": "even",  # the search's options from a start of evenly spaced teacher units (compress --selection even)
    "importance": "importance",  # ... from the teacher's units ranked by importance (compress --selection importance)
    "importance-teacher-head": {},  # ... and the teacher's task head (compress's default head since 2026-12-01)
    "importance-teacher-pooling-teacher-head": {},  # ... a pair read as one sequence, pooled as the teacher
    "importance-pair-cosine-head": {},  # ... a pair's sentences read apart, the head a threshold fitted on their cosine
    "importance-pair-zero-head": {},  # ... read apart, a classifier's head at zero (compress --pooling pair until 2026-12-04)
    "cls-pooling": "cls-pooling",  # ... from the even start classifying from [CLS] through the pooler, not the mean
    "pair-pooling": "pair-pooling",  # ... from the even start reading a pair's two sentences' means multiplied
    "teacher-pooling": "teacher-pooling",  # ... from the even start pooling as the teacher, a pair read as one sequence
    "ends-layers": "ends-layers",  # ... from evenly spaced units of the teacher's first, last and evenly-between layers
    "bottom-layers": "bottom-layers",  # ... of the teacher's first M layers (its top layers dropped)
    "temperature-2": {"temperature": 2.0},  # softer targets: bert's soft CE at T=2; kd's KL at T=2 (alpha kept)
    "kd-soft-t1": {"temperature": 1.0, "alpha": 1.0},  # kd candidates (mobilebert, pretrained): bert's loss, KL at T=1
    "kd-soft-t2": {"temperature": 2.0, "alpha": 1.0},  # ... at T=2, no hard-label term
    "as-kd": "as-kd",  # a bert-style candidate distilled as the kd candidates are: KL at T=20 and 0.3 of the labels
    "tinybert-t1": "tinybert-t1",  # ... as the search did before 2026-11-29: TinyBERT's prediction stage (soft CE, T=1)
    "lr3e-5": {"learning_rate": 3e-5},  # a fine-tuning rate, for pre-trained students (the search's: 1e-4)
    "lr3e-4": {"learning_rate": 3e-4},  # faster rates, for the short runs of the main job
    "lr1e-3": {"learning_rate": 1e-3},
    # the first 16,000 training rows, as a base-size teacher's search may (word embeddings trained before 2026-12-01)
    "train-16k": FIRST_16K,
    "train-16k-frozen-words": {**FIRST_16K, "freeze_word_embeddings": True},  # ... kept as they start
    "train-16k-bottom-layers": FIRST_16K,  # ... from the bottom-layers start
    "train-16k-bottom-layers-teacher-head": FIRST_16K,  # ... with the teacher's task head
    "teacher-head": {},  # the search's options from the even start with the teacher's task head (compress's default)
    "teacher-head-tinybert-t1": "tinybert-t1",  # ... TinyBERT's prediction stage alone (soft CE, T=1)
    "teacher-head-intermediate": "intermediate",  # ... its intermediate stage a quarter of the steps, then t1's
    "teacher-head-augmented": {},  # ... and the versions of its training rows compress's --augment writes
    "teacher-pooling-teacher-head": {},  # a pair read as one sequence, pooled as the teacher, with its task head
    "train-16k-teacher-head": FIRST_16K,  # ... the same on the main job's rows
    "train-16k-teacher-head-no-dropout": FIRST_16K,  # ... with the student's dropout off
    # ... 16,000 rows drawn like dev's lengths (SST-2: sentence-like, 17.6 words where the first 16,000 have 9.5)
    "train-16k-like-dev-teacher-head": {"max_train_examples": 16000, "train_subset": "like-dev"},
    "train-16k-trained-words": {**FIRST_16K, "freeze_word_embeddings": False},  # ... trained
    "train-16k-lr2e-4": {**FIRST_16K, "learning_rate": 2e-4},  # ... at the main job's faster rates
    "train-16k-lr3e-4": {**FIRST_16K, "learning_rate": 3e-4},
    "trained-words": {"freeze_word_embeddings": False},  # every training row, word embeddings trained (kept: "search")
    # the teacher's logits stored once per row, labelled by its export (--teacher-onnx), the teacher not run beside
    "int8-targets": {"teacher_onnx": "export"},
    "train-16k-int8-targets": {**FIRST_16K, "teacher_onnx": "export"},  # ... on the main job's rows
    "imdb-sentences": "imdb-sentences",  # ... and sentences of IMDb's unlabelled reviews, labelled by the teacher
    "imdb-sentences-late": "imdb-sentences",  # ... joining the batches from the second epoch (--unlabelled-from-epoch 1)
    "sentence": {"sentence_weight": 1.0, "teacher_dtype": "bfloat16"},  # ... and the teacher's sentence vectors
    "sentence-0.1": {"sentence_weight": 0.1, "teacher_dtype": "bfloat16"},  # ... a tenth of it
    "sentence-relation": {"sentence_weight": 1.0, "sentence_loss": "relation", "teacher_dtype": "bfloat16"},
    # today's recipe (compress's defaults: importance start, the teacher's head, its pooling; EMA; kd), one part off
    "recipe": {},
    "recipe-constant-rate": {"ema_decay": None},  # 1: the rate near its peak, the trained weights scored
    "recipe-cls-pooling": {},  # 2: [CLS] through the pooler (a pair read as one sequence)
    "recipe-gold-regression": {"alpha": 0.0},  # 3: a regression learns the gold score alone
    "recipe-even-start": {},  # 4: evenly spaced units, not ranked by importance
    "recipe-tinybert-loss": "tinybert-loss",  # 5: TinyBERT's prediction stage (soft CE at T=1; regression: MSE
    # to the teacher's score), the bert-style loss before the study of one loss per signal
    "recipe-half-heads": {},  # the recipe's start with each layer's less important half of its heads pruned
    "recipe-augmented": {},  # the recipe on the training rows and compress's --augment versions of them
    "recipe-mined-pairs": {},  # ... and Wikipedia sentence pairs mined by word overlap (wiki_transfer.py)
    "recipe-wiki-sentences": {},  # ... and Wikipedia sentences of the training rows' lengths (wiki_transfer.py)
    "recipe-wiki-perturbed": {},  # ... the same sentences, half of them broken by one edit (wiki_transfer.py)
}
"""Variant -> the options it changes in the search's run ("annealed": the schedule's length; "even",
"importance", "cls-pooling", "pair-pooling", "teacher-pooling", "ends-layers", "bottom-layers": the start). The temperature variants test one loss per signal (``kd-*``
apply to candidates distilled by ``kd``, at T=20 with 0.3 of the hard labels: mobilebert, pretrained,
and since 2026-11-29 the bert-style ones too; before, those trained on the teacher's soft targets
alone at T=1, which "tinybert-t1" restores, so "search" runs of bert-style candidates recorded
before then are "tinybert-t1" runs; each row records its method). Since the same day the search
scores AdamW runs on their weights' moving average, so "search" and "ema" runs recorded since are
alike and earlier "search" runs are "constant" runs (each row records its ``ema_decay``). Before ``--selection`` existed
the search started from evenly spaced units, so "search" runs recorded then are "even" runs. "cls-pooling" turns off the mean pooling a student inherits from a
mean-pooled teacher (``kdbert_pooling`` in its config), so its head reads the pooler's [CLS] vector;
"pair-pooling" is compress's ``--pooling pair`` (:func:`kdbert.core.pooling.pool_pairs`), its default since
2026-11-29, so on a pair task "even" runs since are pair-pooled too and "teacher-pooling" (``--pooling teacher``:
the pair read as one sequence, pooled as the teacher pools) is their baseline; "ends-layers" copies
the teacher's layers :func:`kdbert.families.selection.ends_and_between` names (6 -> 2: 1 and 6; 6 -> 3: 1, 3, 6)
where "even" copies the uniform map's (3 and 6; 2, 4, 6); "bottom-layers" (and "train-16k-bottom-layers" on the
main job's rows) the teacher's first M (:func:`kdbert.families.selection.first_layers`: 6 -> 2: 1 and 2), a
prefix of its network, "train-16k-bottom-layers-teacher-head" with the teacher's task head (6 -> 1: layer 1, where
the uniform map and the importance elimination of the main job's teacher keep 6); "teacher-head" (and "train-16k-teacher-head") starts "even" with the teacher's task head's output layer on the
start's hidden units, where weight selection leaves it fresh: compress's default since 2026-12-01 (``--head
teacher``), while this study's "even" start, and so its "search" runs, keep the fresh head they were recorded with;
"train-16k-teacher-head-no-dropout" the same start with the student's dropout off (0.1 in the teacher's config). "teacher-head-tinybert-t1" and "teacher-head-intermediate" read that start too: TinyBERT's prediction stage alone, and its two stages within the same steps (a quarter of them matching embeddings, attention and hidden states through the layer map, compress's ``--intermediate-share`` stage, then that prediction stage): the intermediate stage's share at equal steps. "teacher-head-augmented" reads that start too and distils on the training rows and the new versions of them that compress's ``--augment bert`` writes (:func:`kdbert.compress.augment.write_augmented_rows`: the distilled BiLSTM's masking, same-POS swaps and n-gram fragments, up to ``--augment-copies`` a row and ``--augment-max-rows`` in all, made once with seed 0), labelled by the teacher into the store its training rows are in, as the search's ``-aug`` variants distil. "teacher-pooling-teacher-head" reads a pair as one sequence pooled as the teacher
pools ("teacher-pooling") and starts with the teacher's head, which pair pooling's cosine head replaces;
"importance-teacher-head" starts from the units and layers ranked by importance ("importance") with the teacher's head,
"importance-teacher-pooling-teacher-head" the same reading a pair as one sequence. "train-16k-like-dev-teacher-head" the same start on 16,000 rows drawn like dev's lengths (``--train-subset like-dev``, the default since 2026-12-02), where the other "train-16k-*" read the file's first 16,000. "imdb-sentences" adds ``--unlabelled-rows``
sentences of IMDb's 50,000 unlabelled reviews (SST-2's domain, whole sentences as its dev set holds, where
its training rows are mostly phrases), cut as ``--transfer-text`` cuts lines, labelled by the teacher (its
export, with ``--teacher-onnx``) into the store its training rows are in; "imdb-sentences-late" the same,
joining the batches from the second epoch (``--unlabelled-from-epoch 1``). "sentence" adds kd's sentence
term (``--sentence-weight 1``: the student's mean-pooled vector, projected, against the teacher's by cosine
distance), the teacher's vectors labelled once per row by the PyTorch teacher in bfloat16; "sentence-0.1"
at a tenth of that weight; "sentence-relation" the batch's pairwise cosine similarities against the
teacher's (``--sentence-loss relation``, no projection). "int8-targets" gives a candidate of the
teacher's tokens the logits ``--teacher-onnx`` (the teacher's int8 export) stored once per row in the
shared store, instead of the PyTorch teacher's computed beside it; "train-16k-*" on the main job's rows.
"recipe" is the search's recipe as it stands (its start built with compress's defaults by
:func:`build_recipe_starts`), and each "recipe-*" turns one of its parts off (the headline's table of
the recipe, each part off in turn); "recipe-augmented" and "recipe-mined-pairs" add rows to it: compress's
``--augment`` versions of the training rows, up to ``--unlabelled-rows`` Wikipedia sentence pairs of
TF-IDF cosine at least ``--mined-low``, or about ``--unlabelled-rows`` Wikipedia sentences drawn by the
training rows' word counts (:mod:`wiki_transfer`), labelled by the teacher into the shared store."""


AUGMENTED = {"teacher-head-augmented", "recipe-augmented"}  # variants distilling on augmented rows too
RECORDED_POOLING = "pair"  # what a start reads on a pair task unless its variant says: the search's default when
# these variants were recorded (compress --pooling pair, 2026-11-29 to 2026-12-03)
TINYBERT_ONLY = ("head_average", "skip_intermediate", "intermediate_max_steps", "intermediate_lr")
KD_ONLY = ("freeze_word_embeddings",)  # TinyBERT's stages train the word embeddings


def search_options(candidate, settings: SearchSettings, steps: int, teacher: str, start: Path, cache: Path,
                   variant: str, teacher_onnx: str | None = None, eval_every: int | None = None) -> dict:
    """The options the search gives ``candidate``'s run (``compress/search.py`` ``_options``),
    changed as ``variant`` says, paused at ``steps`` and evaluated every ``eval_every`` steps (default
    half of them); a candidate reading stored logits has them labelled by ``teacher_onnx`` where given
    (the search's int8 export of the teacher)."""
    length = steps if VARIANTS[variant] == "annealed" else horizon(settings)  # "even", "importance": the search's
    options = {**run_options(candidate, length, settings, str(cache)), "teacher": teacher, "keep_checkpoints": 1,
               "eval_every": eval_every or steps // 2}
    if starts_from_teacher(candidate):  # the BiLSTM builds its own start and runs Adadelta at a constant rate
        options |= {"student": str(start), "warmup_ratio": min(0.1 * settings.first_steps, 0.1 * steps) / length}
    if teacher_onnx and reads_stored_logits(candidate):  # labelled as the search labels: the teacher's export
        options["teacher_onnx"] = teacher_onnx
    if isinstance(VARIANTS[variant], dict):
        options.update(VARIANTS[variant])
    if options.get("teacher_onnx") == "export":  # labels stored once for every run, by the export given
        if not teacher_onnx:
            raise KdbertError(f"variant {variant} reads the labels of the teacher's export: give --teacher-onnx")
        options |= {"teacher_onnx": teacher_onnx, "logits_cache": str(shared_store_folder())}
        options.pop("teacher_cache", None)
    if VARIANTS[variant] == "annealed":
        options["ema_decay"] = None
    if VARIANTS[variant] == "as-kd":  # kd's own defaults (T=20, alpha 0.7); TinyBERT's stage options dropped
        options = {k: v for k, v in options.items() if k not in TINYBERT_ONLY} | {"method": "kd"}
    if VARIANTS[variant] == "tinybert-t1":  # its prediction stage alone: soft CE at T=1 (regression: gold MSE)
        options |= {"method": "tinybert", "skip_intermediate": True, "head_average": True}
    if VARIANTS[variant] == "tinybert-loss":
        options |= {"method": "tinybert", "skip_intermediate": True, "head_average": True, "regression_target": "teacher"}
    if VARIANTS[variant] == "intermediate":  # the paper's two stages within the same steps: a quarter matching
        options |= {"method": "tinybert", "head_average": True, "intermediate_max_steps": steps // 4,
                    "intermediate_lr": settings.learning_rate}  # layers (compress's --intermediate-share's stage)
    if options.get("method") == "tinybert":
        options = {k: v for k, v in options.items() if k not in KD_ONLY}
    return options


MINED_LOW, ADDED_ROWS = 0.5, 30000  # --mined-low's and --unlabelled-rows' defaults


def rows_tag(variant: str, args) -> str:
    """What names the rows a variant adds in its runs' folder (``-<low>-<rows>``, ``-<rows>``), so that
    a run on other rows is never taken for a finished one."""
    if variant == "recipe-mined-pairs":
        return f"-{args.mined_low}-{args.unlabelled_rows}"
    if variant.startswith("recipe-wiki") or VARIANTS[variant] == "imdb-sentences":
        return f"-{args.unlabelled_rows}"
    return ""


def recorded_tag(record: dict, variant: str) -> str:
    """The :func:`rows_tag` of a recorded run (its ``added_rows``, or read off its command where it
    predates the field, the options it left out at their defaults)."""
    if "added_rows" in record:
        return record["added_rows"]
    given = dict(re.findall(r"--(mined-low|unlabelled-rows) (\S+)", record.get("command", "")))
    return rows_tag(variant, SimpleNamespace(mined_low=float(given.get("mined-low", MINED_LOW)),
                                             unlabelled_rows=int(given.get("unlabelled-rows", ADDED_ROWS))))


def check_keys(keys: dict, records: dict, args) -> None:
    """Refuse a run whose results key (``keys``: key -> variant) holds a run on other added rows: it
    would overwrite that record (another ``--key-suffix`` keeps both)."""
    for key, variant in keys.items():
        if key in records and recorded_tag(records[key], variant) != rows_tag(variant, args):
            raise KdbertError(f"{key} is recorded with other added rows ({recorded_tag(records[key], variant)} "
                              f"against {rows_tag(variant, args)}); pass another --key-suffix")


def added_rows(variant: str, args, task: TaskOptions, folder: Path) -> Path | None:
    """The file of rows ``variant`` adds to the training rows (made once in ``folder``), or None."""
    if VARIANTS[variant] == "imdb-sentences":
        return imdb_sentences(folder / f"imdb-sentences-{args.unlabelled_rows}.jsonl", args.unlabelled_rows,
                              args.imdb_dir)
    if variant == "recipe-mined-pairs":
        return mined_pairs(folder / f"mined-pairs-{args.mined_low}-{args.unlabelled_rows}.jsonl", task,
                           args.unlabelled_rows, low=args.mined_low)
    if variant == "recipe-wiki-sentences":
        return sentences_like(folder / f"wiki-sentences-{args.unlabelled_rows}.jsonl", task, args.unlabelled_rows)
    if variant == "recipe-wiki-perturbed":
        return perturbed_sentences_like(folder / f"wiki-perturbed-{args.unlabelled_rows}.jsonl", task,
                                        args.unlabelled_rows, share=0.5,
                                        whole=folder / f"wiki-sentences-{args.unlabelled_rows}.jsonl")
    if variant in AUGMENTED:
        return augmented_rows(folder / f"augmented-{args.augment_copies}-{args.augment_max_rows}", task,
                              args.augment_copies, args.augment_max_rows)
    return None


def imdb_sentences(out: Path, rows: int, data_dir: str | None) -> Path:
    """``out`` (JSONL, one ``{"sentence": ...}`` a row; written once, atomically): ``rows`` sentences of
    IMDb's unlabelled reviews (:func:`kdbert.compress.transfer.sentences`), shuffled with seed 0."""
    if not out.is_file():
        reviews = read_reviews(data_dir, {("train", "unsup")})[("train", "unsup")]
        found = list(dict.fromkeys(s for review in reviews for s in sentences(review)))
        random.Random(0).shuffle(found)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        partial.write_text("".join(json.dumps({"sentence": s}) + "\n" for s in found[:rows]))
        partial.replace(out)
    return out


def augmented_rows(out: Path, task: TaskOptions, copies: int, max_rows: int) -> Path:
    """``out/augmented.jsonl``: new versions of ``task``'s training rows (those left after its hold-out),
    made once with seed 0 as compress's ``--augment`` makes them (a rerun reuses the file)."""
    data = load_task(task)
    settings = AugmentSettings(kinds=("bert",), copies=copies, max_rows=max_rows, nltk_data=NLTK_DATA)
    facts = write_augmented_rows(data.train, list(data.spec.text_fields), out, settings, seed=0, affordable=max_rows)
    print(f"augmented: {facts['rows']:,} new rows from {facts['augmented_rows']:,} training rows", flush=True)
    return out / "augmented.jsonl"


def cls_start(start: Path, out: Path) -> None:
    """A copy of ``start`` whose config records no pooling, so its classifier reads [CLS] through the pooler."""
    if pooling_of(AutoConfig.from_pretrained(start)) != "mean":
        raise KdbertError(f"{start}: the start already pools by [CLS]; cls-pooling compares against mean pooling")
    shutil.copytree(start, out)
    config = json.loads((out / "config.json").read_text())
    config.pop(POOLING_KEY)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    built = out / "student_init.json"
    if built.is_file():
        built.write_text(json.dumps({**json.loads(built.read_text()), "pooling": "cls"}, indent=2))


def no_dropout_start(start: Path, out: Path) -> None:
    """A copy of ``start`` whose config turns its dropout off (hidden states, attention, classifier)."""
    shutil.copytree(start, out)
    config = json.loads((out / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    (out / "config.json").write_text(json.dumps(config, indent=2))


def half_heads_start(start: Path, out: Path, importance) -> None:
    """A copy of ``start`` (a cut of the teacher's full width, its heads in the teacher's order) whose
    attention keeps, in each layer, the half of its heads the teacher's ``importance`` ranks highest: the
    others' query, key and value rows and their output projection's columns set to zero. A head zero in all
    four is a fixed point of training (its output, and so every gradient reaching those weights, is zero;
    AdamW's decay keeps zero at zero), so the start trains as a student with those heads pruned."""
    config = json.loads((start / "config.json").read_text())
    built = json.loads((start / "student_init.json").read_text())
    heads, width = config["num_attention_heads"], config["hidden_size"]
    if heads != importance.heads.shape[1] or width != importance.hidden.numel():
        raise KdbertError(f"{start}: half-heads needs a start of the teacher's width and heads")
    size = width // heads
    weights = load_file(str(start / "model.safetensors"))
    pruned = {}
    for student_layer, teacher_layer in enumerate(importance.layers(config["num_hidden_layers"])):
        kept = set(top(importance.heads[teacher_layer], heads // 2).tolist())
        dropped = [h for h in range(heads) if h not in kept]
        pruned[student_layer] = dropped
        units = [h * size + i for h in dropped for i in range(size)]
        prefix = f"bert.encoder.layer.{student_layer}.attention."
        for part in ("query", "key", "value"):
            weights[f"{prefix}self.{part}.weight"][units] = 0.0
            weights[f"{prefix}self.{part}.bias"][units] = 0.0
        weights[f"{prefix}output.dense.weight"][:, units] = 0.0
    shutil.copytree(start, out)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "student_init.json").write_text(json.dumps({**built, "pruned_heads": pruned}, indent=2))


RECIPE_STARTS = {"recipe": "start-recipe", "recipe-even-start": "start-recipe-even",
                 "recipe-cls-pooling": "start-recipe-cls", "recipe-half-heads": "start-recipe-half-heads"}
"""The ``recipe*`` variants' starts (folders under the candidate's); the other ``recipe-*`` start as ``recipe``."""


def build_recipe_starts(candidate, teacher: str, task: TaskOptions, context, root: Path, variants: list[str]) -> dict:
    """The starts of the ``recipe*`` variants among ``variants`` as ``kdbert compress`` builds them with
    its defaults (:class:`~kdbert.compress.options.CompressConfig`: units ranked by importance, the
    teacher's task head, its pooling, a pair-pooled classifier's head fitted on the training rows),
    except the part a variant turns off: evenly spaced units (``recipe-even-start``), or the pair
    read as one sequence and classified from [CLS] through the pooler (``recipe-cls-pooling``).
    Built once each; returns variant -> start folder."""
    wanted = {RECIPE_STARTS.get(v, "start-recipe") for v in variants if v.startswith("recipe")}
    todo = [name for name in wanted if not (root / name / "config.json").is_file()]
    if todo:
        model, tokenizer = family_of_folder(teacher).load(Path(teacher))
        data = load_task(task)
        base = replace(context, head=CompressConfig.head)
        apart = reads_pairs_apart(model, base, CompressConfig.pooling, teacher_head=True)  # as compress's starts

        @cache  # the start and the [CLS] start of a single-text task share the joint ranking
        def ranked(pairs_apart: bool):
            found = task_importance(model, layout_of(model.config), data.train, tokenizer, data.spec.max_seq_len,
                                    pairs_apart=pairs_apart)
            print(f"importance{' (pairs apart)' if pairs_apart else ''}: layers dropped in the order "
                  f"{[i + 1 for i in found.dropped]}", flush=True)
            return found

        for name in sorted(todo, key=lambda n: n == "start-recipe-half-heads"):  # after the start it prunes
            if name == "start-recipe-half-heads":
                half_heads_start(root / "start-recipe", root / name, ranked(apart))
            elif name == "start-recipe-cls":  # the pair read as one sequence: the joint reading's ranking
                one_sequence = root / "start-recipe-one-sequence"
                if not (one_sequence / "config.json").is_file():
                    build_from_teacher(candidate, teacher, task, one_sequence, replace(base, importance=ranked(False)),
                                       (model, tokenizer), "teacher")
                cls_start(one_sequence, root / name)
            else:
                importance = ranked(apart) if name == "start-recipe" else None  # recipe-even-start: evenly spaced
                build_from_teacher(candidate, teacher, task, root / name, replace(base, importance=importance),
                                   (model, tokenizer), CompressConfig.pooling, data)
    return {v: root / RECIPE_STARTS.get(v, "start-recipe") for v in variants if v.startswith("recipe")}


def scores(report: dict) -> dict:
    """A run's record: the kept evaluation's scores (picking rows, deciding rows, dev), how it trained,
    and ``curve``, every evaluation's step and scores in order."""
    metrics = report["dev_metrics"]
    curve = [{"step": e["step"], "held_out": e["eval"]["selection_score"], "decide": e["eval"].get("decide_score"),
              "dev": e["eval"]["score"]} for e in report["eval_history"]]
    return {"held_out": metrics["selection_score"], "decide": metrics.get("decide_score"), "dev": metrics["score"],
            "train_seconds": report["train_seconds"], "precision": report["runtime"]["mixed_precision"],
            "method": report["options"]["method"], "ema_decay": report["options"].get("ema_decay"), "curve": curve}


def ablation_setting(task_name: str, teacher: str | None, data_dir: str) -> tuple:
    """``(teacher, task, context, offered)`` of a study's runs: the teacher's folder (default
    ``runs/teacher-<task>``), the task holding out the rows its ``kdbert finetune`` recorded (half of
    them deciding), its shape context and the candidates compress offers it (name -> candidate)."""
    teacher = teacher or run_folder(f"teacher-{task_name}")
    task, _ = held_out_task(teacher, TaskOptions(task=task_name, data_dir=data_dir), trained_on_all=False)
    task = replace(task, decide_share=DECIDE_SHARE)
    context = shape_context(teacher, task)
    return teacher, task, context, {c.name: c for c in all_candidates(context)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--teacher", help="default: runs/teacher-<task>")
    parser.add_argument("--candidate", required=True, help="a candidate's name, e.g. bert-3x256 or bilstm-h300")
    parser.add_argument("--word-vectors", default="encoder:default",
                        help="the BiLSTM's word vectors (the benchmark searches' --word-vectors)")
    parser.add_argument("--variants", nargs="+", default=["search", "schedule-free"], choices=sorted(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--eval-every", type=int, help="evaluate every N steps (default: half of --steps), the best "
                        "on the picking rows kept")
    parser.add_argument("--first-steps", type=int, default=SearchSettings.first_steps,
                        help="the search's first rung, which sets the warm-up and the schedule's horizon (the "
                             "benchmark searches' 300, to rerun one of their runs)")
    parser.add_argument("--runs-dir", default=run_folder("recipe-ablation"))
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--teacher-onnx", help="label stored logits with this export of the teacher, as the search "
                        "does (e.g. runs/base/teacher-sst2/onnx/model.int8.onnx)")
    parser.add_argument("--key-suffix", default="", help="after the task in the results' keys (e.g. a new teacher's)")
    parser.add_argument("--unlabelled-rows", type=int, default=ADDED_ROWS, help="imdb-sentences: how many "
                        "sentences; recipe-mined-pairs: at most how many pairs; recipe-wiki-sentences: about how many sentences")
    parser.add_argument("--imdb-dir", default=IMDB_DIR, help="imdb-sentences: the IMDb archives' folder")
    parser.add_argument("--mined-low", type=float, default=MINED_LOW, help="recipe-mined-pairs: the least cosine a "
                        "mined pair has (every pair at or above it, at most --unlabelled-rows)")
    parser.add_argument("--augment-copies", type=int, default=20, help="*-augmented: versions a row at most")
    parser.add_argument("--augment-max-rows", type=int, default=50000, help="*-augmented: versions in all")
    args = parser.parse_args()
    teacher, task, context, offered = ablation_setting(args.task, args.teacher, args.data_dir)
    if args.candidate.startswith("pretrained-"):  # the packaged pre-trained students compress offers a bigger teacher
        model, tokenizer = family_of_folder(teacher).load(Path(teacher))
        spec = load_task(task).spec
        offered |= {c.name: c for c in pretrained_students(SimpleNamespace(model=model, tokenizer=tokenizer), context, spec)}
    if args.candidate not in offered:
        raise KdbertError(f"--candidate {args.candidate}: not a candidate of this teacher; choose from "
                          f"{', '.join(offered)}")
    candidate = offered[args.candidate]
    root = Path(args.runs_dir) / args.task / candidate.name
    starts = {"even": root / "start", "importance": root / "start-importance",
              "importance-teacher-head": root / "start-importance-teacher-head",
              "importance-teacher-pooling-teacher-head": root / "start-importance-teacher-pooling-teacher-head",
              "importance-pair-cosine-head": root / "start-importance-pair-cosine-head",
              "importance-pair-zero-head": root / "start-importance-pair-zero-head"}
    for selection, start in starts.items() if starts_from_teacher(candidate) else ():
        if not (start / "config.json").is_file() and (selection == "even" or selection in args.variants):
            ranked, head = None, "teacher" if selection.endswith("teacher-head") else context.head
            if selection.startswith("importance") and candidate.start == "teacher-weights":  # a cut's units
                model, tokenizer = family_of_folder(teacher).load(Path(teacher))
                data = load_task(task)
                ranked = task_importance(model, layout_of(model.config), data.train, tokenizer, data.spec.max_seq_len)
                print(f"importance: layers dropped in the order {[i + 1 for i in ranked.dropped]}", flush=True)
            fitted = selection.endswith("cosine-head")  # the head fitted on the training rows' cosines
            build_from_teacher(candidate, teacher, task, start, replace(context, importance=ranked, head=head),
                               pooling="teacher" if "teacher-pooling" in selection else RECORDED_POOLING,
                               data=load_task(task) if fitted else None)
    if "cls-pooling" in args.variants and not (root / "start-cls" / "config.json").is_file():
        cls_start(starts["even"], root / "start-cls")
    starts["cls-pooling"] = root / "start-cls"
    starts["pair-pooling"] = root / "start-pair"
    if "pair-pooling" in args.variants and not (starts["pair-pooling"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["pair-pooling"], context, pooling="pair")
    starts["teacher-pooling"] = root / "start-teacher-pooling"
    if "teacher-pooling" in args.variants and not (starts["teacher-pooling"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["teacher-pooling"], context, pooling="teacher")
    starts["teacher-pooling-teacher-head"] = root / "start-teacher-pooling-teacher-head"
    if "teacher-pooling-teacher-head" in args.variants and not (
            starts["teacher-pooling-teacher-head"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["teacher-pooling-teacher-head"],
                           replace(context, head="teacher"), pooling="teacher")
    starts["ends-layers"] = root / "start-ends"
    if "ends-layers" in args.variants and not (starts["ends-layers"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["ends-layers"], replace(context, layer_map="ends"),
                           pooling=RECORDED_POOLING)
    starts["bottom-layers"] = starts["train-16k-bottom-layers"] = root / "start-bottom"
    if {"bottom-layers", "train-16k-bottom-layers"} & set(args.variants) and not (
            starts["bottom-layers"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["bottom-layers"], replace(context, layer_map="bottom"),
                           pooling=RECORDED_POOLING)
    starts["train-16k-bottom-layers-teacher-head"] = root / "start-bottom-teacher-head"
    if "train-16k-bottom-layers-teacher-head" in args.variants and not (
            starts["train-16k-bottom-layers-teacher-head"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["train-16k-bottom-layers-teacher-head"],
                           replace(context, layer_map="bottom", head="teacher"), pooling=RECORDED_POOLING)
    head_variants = {"teacher-head", "train-16k-teacher-head", "train-16k-like-dev-teacher-head",
                     "teacher-head-tinybert-t1", "teacher-head-intermediate", "teacher-head-augmented"}
    starts |= {variant: root / "start-teacher-head" for variant in head_variants}
    if (head_variants | {"train-16k-teacher-head-no-dropout"}) & set(args.variants) and not (
            starts["teacher-head"] / "config.json").is_file():
        build_from_teacher(candidate, teacher, task, starts["teacher-head"], replace(context, head="teacher"),
                           pooling=RECORDED_POOLING)
    starts["train-16k-teacher-head-no-dropout"] = root / "start-teacher-head-no-dropout"
    if "train-16k-teacher-head-no-dropout" in args.variants and not (
            starts["train-16k-teacher-head-no-dropout"] / "config.json").is_file():
        no_dropout_start(starts["teacher-head"], starts["train-16k-teacher-head-no-dropout"])
    if starts_from_teacher(candidate):
        starts |= build_recipe_starts(candidate, teacher, task, context, root, args.variants)
    metrics = json.loads((Path(teacher) / "metrics.json").read_text())  # the kept share's denominators
    teacher_scores = {"teacher_dev": metrics["score"], "teacher_decide": metrics.get("decide_score")}
    precision = os.environ["KDBERT_MIXED_PRECISION"]  # as the caller set it (common.py pins float32 otherwise)
    command = (f"OMP_NUM_THREADS=1 KDBERT_MIXED_PRECISION={precision} python benchmarks/recipe_ablation.py "
               f"--task {args.task} "
               f"--candidate {args.candidate} --variants {' '.join(args.variants)} "
               f"--seeds {' '.join(map(str, args.seeds))} --steps {args.steps}"
               + (f" --eval-every {args.eval_every}" if args.eval_every else "")
               + (f" --first-steps {args.first_steps}" if args.first_steps != SearchSettings.first_steps else "")
               + (f" --key-suffix={args.key_suffix}" if args.key_suffix else "")
               + (f" --teacher {args.teacher}" if args.teacher else "")
               + (f" --teacher-onnx {args.teacher_onnx}" if args.teacher_onnx else "")
               + (f" --unlabelled-rows {args.unlabelled_rows}" if any(v.startswith(("imdb-sentences", "recipe-mined", "recipe-wiki")) for v in args.variants) else "")
               + (f" --mined-low {args.mined_low}" if "recipe-mined-pairs" in args.variants else "")
               + (f" --augment-copies {args.augment_copies} --augment-max-rows {args.augment_max_rows}"
                  if AUGMENTED & set(args.variants) else "")
               + (f" --word-vectors {args.word_vectors}" if not starts_from_teacher(candidate) else ""))
    # another --steps (or --first-steps) is another run, recorded under its own key
    rung = "" if args.first_steps == SearchSettings.first_steps else f"-first{args.first_steps}"
    key = lambda variant, seed: f"{args.task}{args.key_suffix}/{candidate.name}/{args.steps}{rung}/{variant}/seed{seed}"
    check_keys({key(v, seed): v for v in args.variants for seed in args.seeds}, load_results("recipe_ablation"), args)
    for seed in args.seeds:  # every variant of a seed before the next seed: pairs compare as they come
        for variant in args.variants:
            out = root / f"{variant}{rows_tag(variant, args)}" / f"seed{seed}-steps{args.steps}{rung}"
            if (out / "distill_report.json").is_file():
                report = json.loads((out / "distill_report.json").read_text())
            else:
                settings = SearchSettings(seed=seed, word_vectors=args.word_vectors or None, first_steps=args.first_steps)
                start = starts[variant if variant in starts else "even"]
                options = search_options(candidate, settings, args.steps, teacher, start, root.parent / "teacher-cache",
                                         variant, args.teacher_onnx, args.eval_every)
                run_task = task
                added = added_rows(variant, args, task, root.parent)
                if added:  # the same rows for every seed, labelled once into the store of the training rows
                    run_task = replace(task, unlabelled=str(added),
                                       unlabelled_from_epoch=1 if variant.endswith("-late") else 0)
                    options["logits_cache"] = str(shared_store_folder())
                report = distill_task(run_task, options, str(out), overwrite=True, pause_at_step=args.steps)
                shutil.rmtree(out / "checkpoints", ignore_errors=True)  # 0.1 GB a run; nothing continues it
            row = scores(report) | teacher_scores
            tag = rows_tag(variant, args)
            save_result("recipe_ablation", key(variant, seed),
                        {**machine_info(), "teacher": teacher, "steps": args.steps, "variant": variant, "seed": seed,
                         **row, "command": command, **({"added_rows": tag} if tag else {})})
            print(f"{candidate.name} {variant} seed {seed}: {row}", flush=True)


if __name__ == "__main__":
    main()
