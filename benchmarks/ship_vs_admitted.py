"""How far the speedup a search admitted a candidate at carries to the speedup its graph shows as shipped.

    python benchmarks/ship_vs_admitted.py runs/quickstart/compress runs/qs-*/compress --target 4

Reads each ``compress_report.json`` in the folders given and, for every ship check of a candidate
admitted below ``LINE_BAND`` times ``--target`` (those timed again in turns with the teacher), the
ratio of its speedup as shipped (``shipped.checks``) to its speedup as admitted (``speed.candidates``).
Prints each check, the ratios' mean and standard deviation, and, by a normal reading of them, the
chance that a candidate admitted at each band above the target still meets it as shipped (what
``kdbert.compress.budget.SHIP_LINE_BAND`` is chosen by). Prints only: the figures go into the
reading that cites this command, with the folders read.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from kdbert.compress.speed import LINE_BAND


def ratios(folders: list[Path], target: float) -> list[tuple[str, str, float, float]]:
    """(folder, candidate, admitted, shipped) for every ship check of a candidate admitted below
    ``LINE_BAND * target``."""
    found = []
    for folder in folders:
        report = json.loads((folder / "compress_report.json").read_text())
        admitted = report["speed"]["candidates"]
        for check in report["shipped"]["checks"]:
            speedup = admitted[check["candidate"]]["speedup"]
            if check.get("speedup") is not None and speedup < LINE_BAND * target:
                found.append((str(folder), check["candidate"], speedup, check["speedup"]))
    return found


def passing(mean: float, sd: float, band: float) -> float:
    """The chance that ``shipped / admitted`` is at least ``1 / band``, the ratios normal(mean, sd)."""
    return 0.5 * math.erfc((1.0 / band - mean) / (sd * math.sqrt(2.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="compress output folders")
    parser.add_argument("--target", type=float, default=4.0, help="the searches' --target-speedup")
    args = parser.parse_args()
    found = ratios(args.folders, args.target)
    for folder, candidate, admitted, shipped in found:
        print(f"{folder}  {candidate}  admitted {admitted:.2f}x  shipped {shipped:.2f}x  ({shipped / admitted:.3f})")
    if len(found) < 2:
        raise SystemExit(f"{len(found)} check(s) of candidates admitted below {LINE_BAND * args.target:g}x: "
                         "give more compress folders")
    values = [shipped / admitted for _, _, admitted, shipped in found]
    mean, sd = statistics.mean(values), statistics.stdev(values)
    print(f"{len(values)} checks: shipped / admitted {mean:.3f} (sd {sd:.3f}, {min(values):.2f}-{max(values):.2f})")
    for band in (1.05, 1.08, 1.10, 1.15, 1.20):
        print(f"admitted at {band:.2f}x the target: meets it as shipped with {passing(mean, sd, band):.0%} chance")


if __name__ == "__main__":
    main()
