"""How far the speedup a search admitted a candidate at carries to the speedup its graph shows as shipped.

    python benchmarks/ship_vs_admitted.py runs/quickstart/compress runs/qs-*/compress --target 4

Reads each ``compress_report.json`` in the folders given and, for every ship check of a candidate
admitted below ``LINE_BAND`` times ``--target`` (those timed again in turns with the teacher), the
ratio of its speedup as shipped (``shipped.checks``) to its speedup as admitted (``speed.candidates``).
Prints each check, the ratios' mean and standard deviation, and, by a normal reading of them, the
chance that a candidate admitted at each band above the target still meets it as shipped (what
``kdbert.compress.budget.SHIP_LINE_BAND`` is chosen by). A graph checked twice (a narrow miss timed
again) is one draw of its admission, so the ratios are also read per graph (the mean of its checks):
their mean, standard deviation and the deviation's upper 90% confidence bound over that many graphs
(``sd * sqrt((n - 1) / chi2_0.10(n - 1))``), what ``kdbert.compress.budget.SHIPPED_OVER_ADMITTED`` and
``SHIPPED_SPREAD`` are read from, and the speedups below which a candidate ships at the target with
less than ``SHIP_CHANCE`` and ``CHECK_CHANCE`` by that reading. Prints only: the figures go into the
reading that cites this command, with the folders read.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from scipy.stats import chi2, norm

from kdbert.compress.budget import CHECK_CHANCE, SHIP_CHANCE
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


def per_graph(found: list[tuple[str, str, float, float]]) -> list[float]:
    """The mean shipped / admitted ratio of each (folder, candidate): one admission, its checks averaged."""
    graphs: dict[tuple[str, str], list[float]] = {}
    for folder, candidate, admitted, shipped in found:
        graphs.setdefault((folder, candidate), []).append(shipped / admitted)
    return [statistics.mean(values) for values in graphs.values()]


def spread_bound(sd: float, n: int, confidence: float = 0.90) -> float:
    """The upper ``confidence`` bound of a normal standard deviation read as ``sd`` over ``n`` values:
    ``sd * sqrt((n - 1) / chi2_{1 - confidence}(n - 1))``."""
    return sd * math.sqrt((n - 1) / chi2.ppf(1.0 - confidence, n - 1))


def risk_line(mean: float, sd: float, target: float, chance: float) -> float:
    """The admitted speedup at which ``P(ratio * speedup >= target) = chance``, the ratio normal(mean, sd):
    ``target / (mean - z_chance * sd)``."""
    return target / (mean - norm.ppf(chance) * sd)


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
    graphs = per_graph(found)
    if len(graphs) < 2:
        return
    mean, sd = statistics.mean(graphs), statistics.stdev(graphs)
    bound = spread_bound(sd, len(graphs))
    print(f"{len(graphs)} graphs (their checks averaged): shipped / admitted {mean:.3f} (sd {sd:.3f}; its upper 90% "
          f"bound over {len(graphs)} graphs {bound:.3f})")
    for chance in (SHIP_CHANCE, CHECK_CHANCE):
        print(f"by {mean:.3f} and {bound:.3f}: admitted below {risk_line(mean, bound, args.target, chance):.2f}x, a "
              f"candidate ships at {args.target:g}x with less than {chance:.0%} chance")


if __name__ == "__main__":
    main()
