"""Render the benchmark pages from benchmarks/results/*.json (written by the other scripts here).

    python benchmarks/report.py                      # BENCHMARKS.md and docs/benchmarks/*.md
    python benchmarks/report.py --check              # the same, written nowhere: exit 1 if any is stale
    python benchmarks/report.py --section tinybert   # one section, to stdout
    python benchmarks/report.py --list               # the section names, in page order

BENCHMARKS.md is the headline: the scoreboard, the kept share and the teachers under the current
rules, and a short section per study linking its full record, a page under docs/benchmarks/ (also
the docs site's "Benchmarks", with a copy of the headline as its index and an archive of superseded
runs). Every figure comes from a results file, with the command, machine and date that produced it;
the hand-written readings of those figures are the Markdown notes in benchmarks/notes/, and each
section is one function registered in sections.SECTIONS and placed on a page by sections.shared.PAGES.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sections import SECTIONS, headline, pages, render
from sections.shared import PAGES_DIR, ROOT


def documents(root: Path | None = None) -> dict[Path, str]:
    """Every file the report writes under ``root`` (the repository's by default), with its Markdown."""
    root = root or ROOT
    full_records = pages()
    folder = root / PAGES_DIR
    written = {root / "BENCHMARKS.md": headline(full_records), folder / "index.md": headline(full_records, base="")}
    written.update({folder / f"{page}.md": text for page, text in full_records.items()})
    return written


def main(argv: list[str] | None = None) -> None:
    names = [name for name, _ in SECTIONS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", choices=names, metavar="NAME",
                        help="print one section to stdout instead of writing the pages: " + ", ".join(names))
    parser.add_argument("--list", action="store_true", help="print the section names in page order")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the pages that differ from a fresh render and exit 1 if any does")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(names))
    elif args.section:
        print(render([args.section]))
    elif args.check:
        stale = [path for path, text in documents().items() if not path.is_file() or path.read_text() != text]
        print("\n".join(f"stale: {path.relative_to(ROOT)}" for path in stale) or "every page is current")
        sys.exit(1 if stale else 0)
    else:
        for path, text in documents().items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
