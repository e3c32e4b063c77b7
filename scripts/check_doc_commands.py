#!/usr/bin/env python3
"""Run the commands of the pages users copy from, and fail when one fails.

Docs whose commands nobody runs drift from the CLI: an option renamed, a path that moved. This
runs every fenced block of docs/tutorial.md and of README.md's "## Using the student" section, in
page order, in one fresh temporary folder (the README's blocks use what the tutorial made):

- a ```bash block runs as one script with ``bash -e -o pipefail``;
- a ```python block runs with this Python;
- a block in any other language (or none) is an error: nothing is skipped silently.

Test mode, printed when the check starts: the pages' commands are sized for real data, so each
command named in ``TEST_MODE`` gets those flags appended (a later option wins), and the
tutorial's input files (train.csv, dev.csv, new.csv: a few hundred SST-2 rows from the GLUE data)
and the README's reviews.csv are written first. The whole check takes a few minutes on 2 cores.

``kdbert serve`` runs in the background, as in its own terminal: the block goes on once its
GET /health answers, and at the end of the page the server gets SIGINT (the Ctrl-C that the
tutorial says stops it) and must exit.

The README's commands point at the quickstart's winner, runs/quickstart/compress/winner: the
tutorial's winner (trained on SST-2 rows) is copied there with a run_config.json naming task
sst2 and SST-2's text column in its config.json, so that ``kdbert predict`` reads the `sentence`
column as it does for the quickstart's.

Exits 1 naming the page, the block and the command that failed; 0 when every block ran.

    .venv/bin/python scripts/check_doc_commands.py [--glue-dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = (("docs/tutorial.md", None), ("README.md", "Using the student"))  # (page, its "## " section or all)
TEST_MODE = {  # command -> flags appended to it
    "kdbert finetune": "--epochs 1 --max-steps 4 --no-progress",
    "kdbert compress": "--candidates bert-1x128 --rounds 1 --first-steps 4 --batch-size 8 --length-rows 8 "
                       "--budget-minutes 6 --no-progress",  # an upper bound: room on a busy machine
    "curl": "--fail-with-body --silent --show-error",  # an HTTP error fails the command
}
TRAIN_ROWS, DEV_ROWS, NEW_ROWS = 300, 100, 5
TUTORIAL_WINNER = "runs/compress/winner"
QUICKSTART_WINNER = "runs/quickstart/compress/winner"
HEALTH_URL = "http://127.0.0.1:8000/health"  # kdbert serve's default address, which the pages' curl reaches
SERVE_START_S, SERVE_STOP_S = 180, 30


class CheckError(Exception):
    """A page the check cannot run as written."""


@dataclass
class Block:
    page: str
    number: int  # 1-based, in the page
    line: int  # the page's line of the block's first line of code
    language: str
    code: str

    def where(self) -> str:
        return f"{self.page}, block {self.number} (line {self.line})"


def extract_blocks(text: str, page: str, section: str | None = None) -> list[Block]:
    """The fenced blocks of ``text`` (of its ``## section`` only, when given), refusing any but
    bash and python."""
    lines = text.splitlines()
    start = 0
    if section is not None:
        heading = f"## {section}"
        if heading not in lines:
            raise CheckError(f"{page}: no section '{heading}'")
        start = lines.index(heading) + 1
    blocks, fence = [], None
    for index in range(start, len(lines)):
        line = lines[index]
        if fence is None and section is not None and line.startswith("## "):
            break
        if not line.startswith("```"):
            if fence is not None:
                fence[2].append(line)
            continue
        if fence is None:
            fence = (line[3:].strip(), index + 2, [])
            continue
        language, first_line, code = fence
        block = Block(page, len(blocks) + 1, first_line, language, "\n".join(code) + "\n")
        if language not in ("bash", "python"):
            raise CheckError(f"{block.where()}: a block in {language or 'no language'}; this check runs ```bash "
                             "and ```python blocks: mark it as one of them, or move it out of the checked page")
        blocks.append(block)
        fence = None
    if fence is not None:
        raise CheckError(f"{page}: the block at line {fence[1] - 1} is not closed")
    if not blocks:
        raise CheckError(f"{page}: no blocks to run" + (f" in '## {section}'" if section else ""))
    return blocks


def command_at(block: Block, line: int) -> str:
    """The command that starts on the block's ``line`` (1-based), with its continuation lines."""
    lines = block.code.splitlines()[line - 1:]
    command = []
    for text in lines:
        command.append(text)
        if not text.endswith("\\"):
            break
    return "\n".join(command)


def preamble(bin_dir: Path) -> str:
    """Bash sourced before each block: ``bin_dir`` first on PATH, each TEST_MODE program as a
    function that runs it through ``--exec`` (below), and an ERR trap that writes the failing line
    to $DOC_CHECK_STATE/failed_line."""
    programs = sorted({"kdbert"} | {command.split()[0] for command in TEST_MODE})
    run = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} --exec"
    return "\n".join([
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
        *(f'{program}() {{ {run} {program} "$@" || return; }}' for program in programs),
        """trap '[ -s "$DOC_CHECK_STATE/failed_line" ] || echo "$LINENO" > "$DOC_CHECK_STATE/failed_line"' ERR""",
    ]) + "\n"


def run_command(args: list[str]) -> int:
    """``--exec``: a block's command with its TEST_MODE flags, or ``kdbert serve`` in the background."""
    program, rest = args[0], args[1:]
    if program == "kdbert" and rest[:1] == ["serve"]:
        return serve_in_background(args)
    key = f"{program} {rest[0]}" if rest and f"{program} {rest[0]}" in TEST_MODE else program
    extra = shlex.split(TEST_MODE.get(key, ""))
    if extra:
        print(f"[test mode] {key} ... {' '.join(extra)}", file=sys.stderr, flush=True)
    os.execvp(program, [*args, *extra])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def serve_in_background(args: list[str]) -> int:
    """Start ``kdbert serve`` with its output in $DOC_CHECK_STATE/serve.log, record its pid, and
    return once GET /health answers (1 when it exits or takes SERVE_START_S first)."""
    state = Path(os.environ["DOC_CHECK_STATE"])
    if _answers(HEALTH_URL):
        print(f"doc check: something already answers {HEALTH_URL}; stop it first", file=sys.stderr)
        return 1
    log_path = state / "serve.log"
    with log_path.open("ab") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    with (state / "servers").open("a") as servers:
        servers.write(f"{server.pid}\n")
    started = time.monotonic()
    while time.monotonic() - started < SERVE_START_S:
        if server.poll() is not None:
            print(f"doc check: kdbert serve exited ({server.returncode}) before {HEALTH_URL} answered:\n"
                  + log_path.read_text(errors="replace"), file=sys.stderr)
            return 1
        if _answers(HEALTH_URL):
            print(f"[test mode] kdbert serve runs in the background (log: {log_path}); {HEALTH_URL} answered "
                  f"after {time.monotonic() - started:.0f} s", file=sys.stderr)
            return 0
        time.sleep(0.5)
    print(f"doc check: {HEALTH_URL} did not answer within {SERVE_START_S} s", file=sys.stderr)
    return 1


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_servers(state: Path) -> str | None:
    """Ctrl-C (SIGINT) each server the page started; what went wrong, if one did not stop."""
    servers = state / "servers"
    pids = [int(pid) for pid in servers.read_text().split()] if servers.is_file() else []
    servers.unlink(missing_ok=True)
    stuck = []
    for pid in pids:
        if not _running(pid):
            continue
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + SERVE_STOP_S
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
            stuck.append(pid)
    return f"kdbert serve (pid {stuck}) did not stop within {SERVE_STOP_S} s of Ctrl-C (SIGINT)" if stuck else None


def run_blocks(blocks: list[Block], workdir: Path, state: Path, bin_dir: Path) -> str | None:
    """Run ``blocks`` in order in ``workdir``, then stop the servers they started; the failure, if any."""
    (state / "preamble.sh").write_text(preamble(bin_dir))
    env = {**os.environ, "DOC_CHECK_STATE": str(state)}
    problems = []
    try:
        for block in blocks:
            print(f"\n=== {block.where()}: {block.language}\n{block.code}", flush=True)
            began = time.monotonic()
            if block.language == "python":
                result = subprocess.run([sys.executable, "-c", block.code], cwd=workdir, env=env)
            else:
                script = state / "block.sh"
                script.write_text(f'source "$DOC_CHECK_STATE/preamble.sh"\n{block.code}')
                (state / "failed_line").unlink(missing_ok=True)
                result = subprocess.run(["bash", "-e", "-o", "pipefail", str(script)], cwd=workdir, env=env)
            print(f"\n--- {time.monotonic() - began:.0f} s", flush=True)
            if result.returncode != 0:
                failed_line = state / "failed_line"
                if block.language == "bash" and failed_line.is_file():
                    line = int(failed_line.read_text()) - 1  # the script's first line sources the preamble
                    problems.append(f"{block.page}, block {block.number}, line {block.line + line - 1}: "
                                    f"`{command_at(block, line)}` failed (exit {result.returncode})")
                else:
                    problems.append(f"{block.where()} failed (exit {result.returncode})")
                break
    finally:
        stuck = stop_servers(state)
    if stuck:
        problems.append(f"{blocks[-1].page}: {stuck}")
    return "; ".join(problems) or None


def _sst2_rows(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="") as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        return [(sentence.strip(), "positive" if label == "1" else "negative") for sentence, label in rows]


def _write_csv(path: Path, header: list[str], rows) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def write_inputs(workdir: Path, glue_dir: Path) -> None:
    """The files the pages read: the tutorial's train.csv and dev.csv (text, label) and new.csv
    (text), the README's reviews.csv (review). Training rows are SST-2's of 8 words or more (most
    of its rows are short phrases), the others its dev sentences."""
    sst2 = glue_dir / "SST-2"
    if not (sst2 / "train.tsv").is_file() or not (sst2 / "dev.tsv").is_file():
        raise CheckError(f"no SST-2 train.tsv and dev.tsv in {sst2}; pass --glue-dir")
    train = [row for row in _sst2_rows(sst2 / "train.tsv") if len(row[0].split()) >= 8][:TRAIN_ROWS]
    dev = _sst2_rows(sst2 / "dev.tsv")
    new = [[sentence] for sentence, _ in dev[DEV_ROWS:DEV_ROWS + NEW_ROWS]]
    _write_csv(workdir / "train.csv", ["text", "label"], train)
    _write_csv(workdir / "dev.csv", ["text", "label"], dev[:DEV_ROWS])
    _write_csv(workdir / "new.csv", ["text"], new)
    _write_csv(workdir / "reviews.csv", ["review"], new)


def stand_in_quickstart_winner(workdir: Path) -> None:
    """Copy the tutorial's winner to where the README's commands look, recorded as an SST-2 model."""
    winner = workdir / TUTORIAL_WINNER
    if not winner.is_dir():
        raise CheckError(f"the tutorial made no {TUTORIAL_WINNER}; update TUTORIAL_WINNER to its compress winner")
    shutil.copytree(winner, workdir / QUICKSTART_WINNER)
    (workdir / QUICKSTART_WINNER / "run_config.json").write_text(json.dumps({"task": "sst2"}))
    config = workdir / QUICKSTART_WINNER / "config.json"  # trained on sst2, it would read SST-2's column
    config.write_text(json.dumps({**json.loads(config.read_text()), "kdbert_text_columns": ["sentence"]}))
    print(f"\n[test mode] {TUTORIAL_WINNER} copied to {QUICKSTART_WINNER}, recorded as task sst2", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", type=Path,
                        default=Path(os.environ.get("KDBERT_GLUE_DIR", REPO.parent / "shared/data/glue_data")),
                        help="GLUE data with SST-2 (default: $KDBERT_GLUE_DIR, else ../shared/data/glue_data)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="kdbert-doc-check-"))
    workdir, state = root / "work", root / "state"
    workdir.mkdir()
    state.mkdir()
    print(f"doc check in {workdir}; test mode appends:")
    for command, flags in TEST_MODE.items():
        print(f"  {command} ... {flags}")
    print("  kdbert serve: runs in the background until GET /health answers, then Ctrl-C at the end of the page")
    try:
        write_inputs(workdir, args.glue_dir)
        failure = None
        for page, section in PAGES:
            if page == "README.md":
                stand_in_quickstart_winner(workdir)
            blocks = extract_blocks((REPO / page).read_text(), page, section)
            failure = run_blocks(blocks, workdir, state, Path(sys.executable).parent)
            if failure:
                break
    except CheckError as error:
        failure = str(error)
    minutes = (time.monotonic() - began) / 60
    if failure:
        print(f"\ndoc check FAILED after {minutes:.1f} min: {failure}\n(its folder is kept: {root})", file=sys.stderr)
        return 1
    print(f"\ndoc check passed: every block of {', '.join(page for page, _ in PAGES)} ran ({minutes:.1f} min)")
    if not args.keep:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--exec"]:
        sys.exit(run_command(sys.argv[2:]))
    sys.exit(main())
