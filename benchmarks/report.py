"""Render BENCHMARKS.md from benchmarks/results/*.json (written by the other scripts here).

    python benchmarks/report.py                      # every section, into BENCHMARKS.md
    python benchmarks/report.py --section tinybert   # one section, to stdout
    python benchmarks/report.py --list               # the section names, in page order

Every figure in BENCHMARKS.md comes from a results file, with the command, machine and date
that produced it; the hand-written readings of those figures are the Markdown notes in
benchmarks/notes/, and each section is one function registered in sections.SECTIONS.
"""

from __future__ import annotations

import argparse

from sections import SECTIONS, render
from sections.shared import ROOT


def main(argv: list[str] | None = None) -> None:
    names = [name for name, _ in SECTIONS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", choices=names, metavar="NAME",
                        help="print one section to stdout instead of writing BENCHMARKS.md: " + ", ".join(names))
    parser.add_argument("--list", action="store_true", help="print the section names in page order")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(names))
    elif args.section:
        print(render([args.section]))
    else:
        (ROOT / "BENCHMARKS.md").write_text(render())
        print(f"wrote {ROOT / 'BENCHMARKS.md'}")


if __name__ == "__main__":
    main()
