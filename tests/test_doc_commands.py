"""scripts/check_doc_commands.py, which CI runs on the tutorial and the README: it finds the pages'
blocks, and a block whose command fails (a renamed option) fails the check, naming the page, block,
line and command. A stand-in ``kdbert`` keeps this fast; the real commands run in CI's doc check."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_doc_commands", REPO / "scripts" / "check_doc_commands.py")
check = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = check
spec.loader.exec_module(check)


def page_blocks(page, section=None):
    return check.extract_blocks((REPO / page).read_text(), page, section)


def test_the_pages_blocks_are_found():
    tutorial = page_blocks("docs/tutorial.md")
    assert [block.language for block in tutorial] == ["bash"] * 6
    assert [block.code.split()[0:2] for block in tutorial] == [
        ["head", "-3"], ["kdbert", "finetune"], ["kdbert", "compress"], ["kdbert", "predict"], ["kdbert", "serve"],
        ["curl", "-d"]]
    assert "--held-out-fraction 0.1" in tutorial[1].code and "runs/compress" in tutorial[2].code
    readme = page_blocks("README.md", "Using the student")
    assert [block.language for block in readme] == ["bash", "bash", "python"]
    assert all(check.QUICKSTART_WINNER in block.code for block in readme)
    assert "kdbert serve" in readme[1].code and "curl" in readme[1].code


def test_a_block_in_another_language_is_refused():
    with pytest.raises(check.CheckError, match=r"doc.md, block 2 \(line 6\): a block in console"):
        check.extract_blocks("```bash\ntrue\n```\n\n```console\n$ kdbert predict\n```\n", "doc.md")
    with pytest.raises(check.CheckError, match="no blocks to run in '## Using'"):
        check.extract_blocks("## Using\n\ntext\n\n## Next\n\n```bash\ntrue\n```\n", "doc.md", "Using")


def test_a_renamed_option_fails_naming_the_page_block_and_command(tmp_path):
    fake_bin, workdir, state = tmp_path / "bin", tmp_path / "work", tmp_path / "state"
    for folder in (fake_bin, workdir, state):
        folder.mkdir()
    kdbert = fake_bin / "kdbert"  # records its arguments; refuses an unknown option as argparse does
    kdbert.write_text('#!/bin/sh\necho "kdbert $*" >> calls.txt\n'
                      'case " $* " in *" --no-such-option "*) echo "unrecognized arguments" >&2; exit 2;; esac\n')
    kdbert.chmod(0o755)
    doc = ("# Page\n\n```bash\nkdbert finetune --task train.csv\n```\n\n"
           "```bash\necho ok\necho '{\"text\": \"x\"}' | kdbert predict --model m \\\n"
           "    --input - --no-such-option 1\ntouch never-ran\n```\n")
    failure = check.run_blocks(check.extract_blocks(doc, "doc.md"), workdir, state, fake_bin)
    assert failure == ("doc.md, block 2, line 9: `echo '{\"text\": \"x\"}' | kdbert predict --model m \\\n"
                       "    --input - --no-such-option 1` failed (exit 2)")
    assert not (workdir / "never-ran").exists()
    assert (workdir / "calls.txt").read_text().splitlines() == [
        f"kdbert finetune --task train.csv {check.TEST_MODE['kdbert finetune']}",
        "kdbert predict --model m --input - --no-such-option 1"]
