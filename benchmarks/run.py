"""Run a recorded experiment of benchmarks/experiments.yaml by its name.

    python benchmarks/run.py list                   # every experiment: name, section, what it reproduces
    python benchmarks/run.py run NAME [--dry-run]   # its script with the recorded arguments, run by run
    python benchmarks/run.py rerun NAME [--dry-run] # the same with the script's check of recorded figures

``--dry-run`` prints the commands instead of running them. Commands run from the repository root
with this interpreter, one after the other; the first that fails stops the rest.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BENCHMARKS = Path(__file__).resolve().parent
EXPERIMENTS = BENCHMARKS / "experiments.yaml"


@dataclass(frozen=True)
class Experiment:
    """One recorded experiment: ``script`` (in benchmarks/) run once per entry of ``runs`` (its
    arguments), with ``env``; ``rerun`` is added to each run for the script's rerun check."""

    name: str
    section: str
    reproduces: str
    script: str
    runs: list[list[str]]
    results: dict
    env: dict[str, str] = field(default_factory=dict)
    rerun: list[str] | None = None

    def commands(self, rerun: bool = False) -> list[list[str]]:
        """The argv of every run (``rerun``: with the rerun arguments)."""
        if rerun and self.rerun is None:
            raise SystemExit(f"experiment {self.name!r} has no rerun check ({self.script} has no --rerun): "
                             f"use `run {self.name}`")
        extra = self.rerun if rerun else []
        return [[sys.executable, f"benchmarks/{self.script}", *args, *extra] for args in self.runs]


def load_experiments(path: Path = EXPERIMENTS) -> dict[str, Experiment]:
    """The experiments of ``path`` by name, their argument lines split as a shell would."""
    experiments = {}
    for name, entry in yaml.safe_load(path.read_text()).items():
        experiments[name] = Experiment(
            name=name, section=entry["section"], reproduces=entry["reproduces"], script=entry["script"],
            runs=[shlex.split(line) for line in entry["runs"]], results=entry["results"],
            env={key: str(value) for key, value in (entry.get("env") or {}).items()},
            rerun=shlex.split(entry["rerun"]) if "rerun" in entry else None)
    return experiments


def shown(experiment: Experiment, argv: list[str]) -> str:
    """A command as one would type it from the repository root."""
    env = " ".join(f"{key}={value}" for key, value in experiment.env.items())
    return " ".join(filter(None, [env, "python", shlex.join(argv[1:])]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every experiment")
    for command, text in (("run", "run an experiment"), ("rerun", "rerun its recorded figures and compare")):
        sub = commands.add_parser(command, help=text)
        sub.add_argument("name")
        sub.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    experiments = load_experiments()
    if args.command == "list":
        for experiment in experiments.values():
            print(f"{experiment.name:22} [{experiment.section}] {experiment.reproduces}")
        return
    if args.name not in experiments:
        raise SystemExit(f"no experiment {args.name!r} in {EXPERIMENTS.name}: "
                         f"`python benchmarks/run.py list` names them")
    experiment = experiments[args.name]
    for command in experiment.commands(rerun=args.command == "rerun"):
        print(shown(experiment, command), flush=True)
        if args.dry_run:
            continue
        done = subprocess.run(command, cwd=BENCHMARKS.parent, env={**os.environ, **experiment.env})
        if done.returncode:
            raise SystemExit(f"{experiment.script} failed (exit {done.returncode}); the runs after it were not started")


if __name__ == "__main__":
    main()
