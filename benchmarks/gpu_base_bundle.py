"""The MPNet-base teacher's GPU session inputs, cut into pieces that device calls carry one at a time.

    python benchmarks/base_teacher.py fetch          # once: runs/base/all-mpnet-base-v2
    python benchmarks/gpu_base_bundle.py --wheels DIR

A device call carries at most 64 MiB with the working tree, and the pre-trained MPNet alone is 438 MB,
so the bundle is one tar cut into pieces (``--output-dir``/pNN/piece, default under 50 MiB each): each
call carries one folder and appends its piece to the same file on the device machine while it stays
warm, and ``gpu_base_session.sh`` joins them. The tar holds, in this order (a first piece alone unpacks the
wheels and the data, enough to check the imports):

- ``wheels/``: the wheels in ``--wheels`` (the Python packages kdbert imports that the device image
  lacks or holds in another version: this machine's transformers, optuna, colorlog, dill, schedulefree).
- ``glue_data/<task>/train.tsv`` and ``dev.tsv`` of ``--tasks``, whole, byte for byte.
- ``minilm/``: the packaged all-MiniLM-L6-v2 (the pre-trained student), re-saved as the teacher below.
- ``all-mpnet-base-v2/``: the pre-trained MPNet (``base_teacher.py fetch``) re-saved with float16
  weights and a config that loads them as float32 (:func:`gpu_bundle.save_teacher`; relative error at
  most 2^-11 per weight, before any fine-tuning), with its tokenizer and sentence-transformers files
  (the mean pooling kdbert reads from ``1_Pooling``).

Writes atomically (a scratch folder renamed at the end); refuses a piece size the carry limit cannot hold.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from gpu_bundle import save_teacher
from paths import GLUE_DIR, run_folder

from kdbert.core.loading import default_model_path
from kdbert.data.tasks import GLUE_TASKS

SENTENCE_FILES = ("1_Pooling", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
MIB = 2 ** 20


def save_model(source: Path, out: Path) -> None:
    """``source`` in float16 (:func:`gpu_bundle.save_teacher`) with its sentence-transformers files."""
    save_teacher(str(source), out)
    for name in SENTENCE_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, out / name)
        elif (source / name).is_file():
            shutil.copy2(source / name, out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpnet", default=run_folder("base/all-mpnet-base-v2"))
    parser.add_argument("--glue", default=GLUE_DIR)
    parser.add_argument("--tasks", nargs="+", default=["sst2", "mrpc"], choices=["cola", "sst2", "mrpc", "stsb", "rte"])
    parser.add_argument("--wheels", required=True, help="a folder of .whl files to carry")
    parser.add_argument("--piece-mib", type=float, default=50.0,
                        help="at most this many MiB a piece (the working tree travels beside it: 64 MiB in all)")
    parser.add_argument("--output-dir", default=run_folder("carry-base"))
    args = parser.parse_args()
    if not 1 <= args.piece_mib <= 60:
        sys.exit(f"--piece-mib {args.piece_mib}: choose 1 to 60 (a call carries 64 MiB with the working tree)")
    out = Path(args.output_dir)
    if out.exists():
        sys.exit(f"{out} exists: remove it to write the bundle again")
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.is_dir() else None) as scratch:
        stage = Path(scratch) / "stage"
        save_model(Path(args.mpnet), stage / "all-mpnet-base-v2")
        save_model(Path(default_model_path()), stage / "minilm")
        for task in args.tasks:
            for split in ("train", "dev"):
                folder = GLUE_TASKS[task].glue_folder
                target = stage / "glue_data" / folder / f"{split}.tsv"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(args.glue) / folder / f"{split}.tsv", target)
        shutil.copytree(args.wheels, stage / "wheels")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:  # the wheels first: the first piece unpacks them
            for part in ("wheels", "glue_data", "minilm", "all-mpnet-base-v2"):
                tar.add(stage / part, arcname=f"carry-base/{part}")
        data, size = archive.getvalue(), int(args.piece_mib * MIB)
        pieces = Path(scratch) / "pieces"
        for i, start in enumerate(range(0, len(data), size)):
            (pieces / f"p{i:02d}").mkdir(parents=True)
            (pieces / f"p{i:02d}" / "piece").write_bytes(data[start:start + size])
        pieces.rename(out)
    print(f"{out}: {len(data) / MIB:.1f} MiB in {i + 1} pieces of at most {args.piece_mib:g} MiB")


if __name__ == "__main__":
    main()
