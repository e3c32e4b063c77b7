"""``kdbert students build`` (general students of several shapes, once per base model:
:mod:`kdbert.students.build`) and ``kdbert students list`` (what a store holds)."""

from __future__ import annotations

from kdbert.cli.common import OptionFlags, add_command, given_options, require
from kdbert.options import build_config
from kdbert.students.build import BuildConfig, build_students, describe
from kdbert.students.store import builds, default_store


def cmd_build(args) -> int:
    facts = build_students(build_config(BuildConfig, given_options(args, BuildConfig)))
    print(describe(facts))
    return 0


def cmd_list(args) -> int:
    found = builds(args.store)
    if not found:
        print(f"no general students in {args.store or default_store()}; build them with `kdbert students build`")
        return 0
    for build in found:
        last = build.facts["history"][-1]["held_out_loss"]
        print(build.describe())
        print("  " + ", ".join(f"{name} (held-out relation loss {last[name]:.4f})" for name in build.shapes))
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "students", None, help="general students built once per base model",
                    description="General students: BERT-style shapes distilled from a pre-trained base on raw "
                                "text once, then the start of every `kdbert compress` whose teacher was fine-tuned "
                                "from that base.")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    q = add_command(verbs, table, "build", cmd_build, key="students build",
                    help="distil general students of several shapes from a base model at once",
                    description="Distil BERT-style students of several shapes from a pre-trained base on raw text "
                                "with MiniLM's self-attention relations, one base pass feeding them all, within "
                                "--budget-minutes of training (rerun with more to continue). They are stored under "
                                "a key of the base's weights, where `kdbert compress` finds them.")
    OptionFlags(q).add(BuildConfig)
    require(q, "corpus")
    q = add_command(verbs, table, "list", cmd_list, key="students list",
                    help="the general students in a store", description="Every base's build in the store: its "
                                                                        "shapes, time and held-out relation loss.")
    q.add_argument("--store", help="the store folder (default: $KDBERT_STUDENTS or ~/.cache/kdbert/students)")
