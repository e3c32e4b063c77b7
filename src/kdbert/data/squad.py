"""Extractive question answering in the SQuAD format (v1.1, and v2.0's unanswerable questions).

A file is ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible"?}]}]}]}`` (``.json`` or ``.json.gz``). A question is an
:class:`~kdbert.data.glue.Example` whose ``texts`` are ``(question, context)`` and whose label is
its :class:`Answers`: every gold answer as ``(text, character offset in the context)``, none for
an unanswerable question. Each answer is checked against its context when read.

``--task squad`` (or ``squad2``) reads ``train-v1.1.json`` and ``dev-v1.1.json`` (``-v2.0``) from
``--data-dir``, or the files given by ``--train-file`` / ``--dev-file`` (own data in the same
format). Without a training file, ``--train-articles N`` trains on the first N articles of the dev
file and scores the others: figures made so are not comparable with published SQuAD results.
"""

from __future__ import annotations

import json
from pathlib import Path

from kdbert.data.glue import Example, TaskData
from kdbert.data.tasks import QA_TASKS, TaskSpec
from kdbert.data.textfile import read_text
from kdbert.errors import KdbertError


class Answers(tuple):
    """The gold answers of one question: a tuple of ``(text, start)``; ``qid`` is the question's id."""

    qid: str = ""

    def __new__(cls, answers=(), qid: str = ""):
        self = super().__new__(cls, tuple((str(text), int(start)) for text, start in answers))
        self.qid = qid
        return self

    def __reduce__(self):  # keeps the id through copies and pickling (data-loader workers)
        return Answers, (tuple(self), self.qid)


def _file(folder: Path, stem: str) -> Path:
    for candidate in (folder / f"{stem}.json", folder / f"{stem}.json.gz"):
        if candidate.is_file():
            return candidate
    raise KdbertError(f"missing {folder / (stem + '.json')} (or .json.gz); put the SQuAD files there, pass "
                      "--train-file / --dev-file, or --train-articles N to split the dev file by article")


def read_squad(path: str | Path) -> list[tuple[str, list[Example]]]:
    """``[(article title, questions)]`` of a SQuAD-format file, every question checked."""
    path = Path(path)
    if not path.is_file():
        raise KdbertError(f"SQuAD file {path} does not exist; check the path")
    try:
        document = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise KdbertError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); expected a SQuAD file") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise KdbertError(f"{path}: no top-level \"data\" list; expected the SQuAD format")
    articles = []
    for a, article in enumerate(document["data"]):
        title = article.get("title", f"article {a}")
        questions = []
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            context = paragraph.get("context") or ""
            for q, qa in enumerate(paragraph.get("qas", [])):
                where = f"{path}: article {title!r}, question {qa.get('id', f'{p}.{q}')}"
                if not context.strip():
                    raise KdbertError(f"{where}: the question has no context; give its paragraph a \"context\"")
                if not (qa.get("question") or "").strip():
                    raise KdbertError(f"{where}: empty question; give it a \"question\" or remove it")
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                for answer in answers:
                    text, start = answer.get("text", ""), answer.get("answer_start", -1)
                    if not isinstance(start, int) or context[start:start + len(text)] != text or not text:
                        raise KdbertError(f"{where}: answer {text!r} is not at offset {start} of its context "
                                          f"(found {context[start:start + len(text)]!r}); fix answer_start")
                if not answers and not qa.get("is_impossible"):
                    raise KdbertError(f"{where}: no answers and not marked is_impossible; add its answers")
                questions.append(Example((qa["question"], context),
                                         Answers([(x["text"], x["answer_start"]) for x in answers], str(qa.get("id", "")))))
        articles.append((title, questions))
    return articles


def _flat(articles) -> list[Example]:
    return [question for _, questions in articles for question in questions]


def load_squad(spec: TaskSpec, data_dir: str | None, train_file: str | None = None, dev_file: str | None = None,
               train_articles: int | None = None) -> TaskData:
    """The SQuAD task ``spec`` from ``data_dir`` or the given files; ``train_articles``: split the
    dev file, the first N articles to train (see the module docstring)."""
    folder = Path(data_dir or ".")
    version = QA_TASKS[spec.name]
    dev = read_squad(dev_file or _file(folder, f"dev-{version}"))
    if train_articles:
        if train_file:
            raise KdbertError("--train-articles splits the dev file because there is no training file; drop it or "
                              "--train-file")
        if not 0 < train_articles < len(dev):
            raise KdbertError(f"--train-articles {train_articles}: the dev file has {len(dev)} articles; keep at "
                              "least one on each side")
        return TaskData(spec, _flat(dev[:train_articles]), {"dev": _flat(dev[train_articles:])})
    train = read_squad(train_file or _file(folder, f"train-{version}"))
    return TaskData(spec, _flat(train), {"dev": _flat(dev)})
