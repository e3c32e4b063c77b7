"""benchmarks/run.py and benchmarks/experiments.yaml without running anything: every recorded
experiment's commands, as `--dry-run` prints them, parse with its script's own argparse."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import run  # noqa: E402
from sections import SECTIONS  # noqa: E402

EXPERIMENTS = run.load_experiments()


ORIGINAL_PARSE_ARGS = argparse.ArgumentParser.parse_args


class Parsed(Exception):
    """Raised by argparse once a script's command line parsed: the script stops before any work."""


def parse_with_script(script: str, args: list[str], monkeypatch) -> argparse.Namespace:
    """``args`` parsed by ``script``'s own ``main`` (its parser, its checks), stopped right after."""
    def parse_then_stop(parser, argv=None, namespace=None):
        namespace = ORIGINAL_PARSE_ARGS(parser, argv, namespace)
        if parser.prog == script:  # the script's parser, not one a library builds on the way
            raise Parsed(namespace)
        return namespace

    module = importlib.import_module(script.removesuffix(".py"))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(Parsed) as parsed:
        module.main()
    return parsed.value.args[0]


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_command_of_an_experiment_parses_with_its_script(name, monkeypatch, capsys):
    experiment = EXPERIMENTS[name]
    assert experiment.section in {section for section, _ in SECTIONS}
    assert (Path(run.BENCHMARKS) / experiment.script).is_file()
    printed = {}
    for rerun in (False, True) if experiment.rerun is not None else (False,):
        run.main(["rerun" if rerun else "run", name, "--dry-run"])
        printed[rerun] = capsys.readouterr().out.splitlines()
        assert len(printed[rerun]) == len(experiment.runs)
    for rerun, lines in printed.items():
        for line in lines:
            words = shlex.split(line)
            words = words[words.index("python") + 1:]  # after the environment, if any
            assert words[0] == f"benchmarks/{experiment.script}"
            args = parse_with_script(experiment.script, words[1:], monkeypatch)
            assert args.rerun if rerun else not getattr(args, "rerun", False)


def test_list_names_every_experiment_and_unknown_names_are_refused(capsys):
    run.main(["list"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(EXPERIMENTS)
    with pytest.raises(SystemExit, match="no experiment 'nope' in experiments.yaml"):
        run.main(["run", "nope", "--dry-run"])
    with pytest.raises(SystemExit, match="has no rerun check"):
        run.main(["rerun", "quickstart", "--dry-run"])


def test_an_experiment_runs_its_script_from_the_repository_root(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(run.subprocess, "run", lambda argv, cwd, env: calls.append((argv, cwd, env["OMP_NUM_THREADS"]))
                        or argparse.Namespace(returncode=0))
    run.main(["run", "teacher-cache"])
    assert calls == [([sys.executable, "benchmarks/bench_teacher_cache.py", "--task", "rte", "--teacher",
                       "runs/teacher-rte", "--rows", "500", "--epochs", "2"], run.BENCHMARKS.parent, "1")]


def test_distill_variants_are_data_that_name_every_recorded_variant():
    import distill_glue
    from common import load_results
    from sections.shared import GPU_RESULTS

    recorded = {record["variant"].removesuffix("+bf16") for results in (load_results("distill"),
                                                                         load_results("distill", GPU_RESULTS))
                for record in results.values()}
    # one row was recorded by hand under its own name: tinybert-task when its prediction stage ran at 3e-5
    assert recorded - set(distill_glue.VARIANTS) == {"tinybert-task-lr3e-5"}
    assert distill_glue.VARIANTS["tinybert4-finetune"] == {
        "method": "tinybert", "student": "tinybert4", "skip_intermediate": True, "no_prediction_loss": True,
        "learning_rate": 1e-4}
    assert distill_glue.VARIANTS["mobilebert-task"]["temperature"] == 2.0  # a float, as recorded
