"""Every default of `kdbert compress` and the quickstart is defined once, in its option declaration
(:class:`~kdbert.compress.options.CompressConfig`, :class:`~kdbert.cli.quickstart.QuickstartConfig`),
and read from there: a second literal definition anywhere else in the compress package or the two
commands' modules fails here."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import kdbert
from kdbert.cli.quickstart import QuickstartConfig
from kdbert.compress.options import CompressConfig

SOURCE = Path(kdbert.__file__).parent
DECLARATIONS = {("compress/options.py", "CompressConfig"), ("cli/quickstart.py", "QuickstartConfig")}


def literal_defaults(path: Path, names: set[str], root: Path = SOURCE) -> list[str]:
    """``file:line name = value`` for each parameter default, class field and ``add_argument``
    default named like an option whose default is a literal (not None or False: "not given"),
    outside the declarations; ``file`` relative to ``root``."""
    where = str(path.relative_to(root))
    found = []

    def check(name: str, value, line: int) -> None:
        if name in names and isinstance(value, ast.Constant) and value.value not in (None, False):
            found.append(f"{where}:{line} {name} = {value.value!r}")

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            for arg, value in zip(positional[len(positional) - len(args.defaults):], args.defaults):
                check(arg.arg, value, arg.lineno)
            for arg, value in zip(args.kwonlyargs, args.kw_defaults):
                check(arg.arg, value, arg.lineno)
        elif isinstance(node, ast.ClassDef) and (where, node.name) not in DECLARATIONS:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    check(item.target.id, item.value, item.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for keyword in node.keywords:  # the command line has no defaults of its own
                if keyword.arg == "default" and node.args and isinstance(node.args[0], ast.Constant):
                    check(node.args[0].value.lstrip("-").replace("-", "_"), keyword.value, node.lineno)
    return found


def test_compress_and_quickstart_defaults_are_defined_once():
    names = {f.name for f in fields(CompressConfig)} | {f.name for f in fields(QuickstartConfig)}
    files = sorted((SOURCE / "compress").glob("*.py")) + [SOURCE / "cli" / "quickstart.py",
                                                           SOURCE / "cli" / "compress.py"]
    assert [line for path in files for line in literal_defaults(path, names)] == []


def test_the_scan_finds_a_second_definition(tmp_path):
    module = tmp_path / "search.py"
    module.write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Settings:\n    first_steps: int = 200\n"
                      "\n\ndef run(plan, workers=1, seed=None):\n    parser.add_argument('--budget-minutes', default=30)\n")
    found = literal_defaults(module, {"first_steps", "workers", "seed", "budget_minutes"}, root=tmp_path)
    assert found == ["search.py:6 first_steps = 200", "search.py:9 workers = 1", "search.py:10 budget_minutes = 30"]


def test_the_quickstart_shares_compress_options_help_and_checks():
    shared = {f.name for f in fields(QuickstartConfig) if f.metadata["group"] != "quickstart"}
    assert {"target_speedup", "budget_minutes", "first_steps", "word_vectors"} <= shared
    for name in shared:
        assert QuickstartConfig.__dataclass_fields__[name].metadata == CompressConfig.__dataclass_fields__[name].metadata
    assert QuickstartConfig().word_vectors == "encoder:default"  # the BiLSTM candidates read the teacher's vectors


def test_the_quickstart_hands_compress_every_compress_option_it_takes():
    from kdbert.cli.quickstart import compress_options

    chosen = QuickstartConfig(kd_labels="export", logits_cache="labels", timing_threads=1)
    config = CompressConfig(teacher="t", **{name: getattr(chosen, name) for name in compress_options()})
    assert (config.kd_labels, config.logits_cache, config.timing_threads) == ("export", "labels", 1)
    assert "output_dir" not in compress_options() and "kd_labels" in compress_options()
