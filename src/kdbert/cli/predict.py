"""``kdbert predict``: a trained model or its export run on the rows of a CSV, TSV or JSONL file."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

from kdbert.cli.common import add_command, require
from kdbert.data.custom import jsonl_rows
from kdbert.errors import KdbertError

STDIN = "-"


def stdin_rows() -> list[tuple[int, dict]]:
    """``(line_number, row)`` of the JSONL read from standard input (one object per line)."""
    rows = jsonl_rows(sys.stdin, "stdin")
    if not rows:
        raise KdbertError("stdin: no data rows found; pipe one JSON object per line")
    return rows


def row_texts(rows: list[tuple[int, dict]], columns: tuple[str, ...], source: str) -> list[tuple[str, ...]]:
    """The text(s) of ``columns`` in every row; a row without one is refused, naming its line and columns."""
    texts = []
    for line_no, row in rows:
        missing = [column for column in columns if row.get(column) is None]
        if missing:
            raise KdbertError(f"{source}:{line_no}: no column {missing[0]!r} (the row has {', '.join(map(str, row))}); "
                              "set --text-columns to the file's text column(s)")
        texts.append(tuple(str(row[column]) for column in columns))
    return texts


def format_records(records: list[dict], as_csv: bool) -> str:
    """The predictions as JSONL, or as CSV with a header."""
    if not as_csv:
        return "".join(json.dumps(record) + "\n" for record in records)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` under a temporary name first: a reader sees no file or the whole one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def cmd_predict(args) -> int:
    from kdbert.data.custom import read_rows
    from kdbert.deploy.predict import load

    columns = tuple(c.strip() for c in args.text_columns.split(",")) if args.text_columns else None
    if columns is not None and not (1 <= len(columns) <= 2 and all(columns)):
        raise KdbertError(f"--text-columns {args.text_columns}: give one column name or two comma-separated names")
    rows = stdin_rows() if args.input == STDIN else read_rows(args.input)
    predictor = load(args.model, threads=args.threads, batch_size=args.batch_size)
    source = "stdin" if args.input == STDIN else args.input
    texts = row_texts(rows, columns or predictor.text_fields, source)
    records = predictor.predict([t[0] if len(t) == 1 else t for t in texts])
    if args.output is None:
        sys.stdout.write(format_records(records, as_csv=False))
        return 0
    output = Path(args.output)
    write_atomically(output, format_records(records, as_csv=output.suffix.lower() == ".csv"))
    print(f"saved {len(records)} predictions to {output}", file=sys.stderr)
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "predict", cmd_predict,
                    help="run a trained model or its ONNX export on the rows of a CSV, TSV or JSONL file",
                    description="Predict a label and its probability (or the score of a regressor) for every row "
                                "of a CSV, TSV or JSONL file (by extension; `-` reads JSONL from stdin), batched "
                                "by length, in the input's order. Writes JSONL to stdout, or to --output (CSV "
                                "when it ends in .csv).")
    p.add_argument("--model", help="model folder (HF or BiLSTM, run in PyTorch), or an export of `kdbert export` "
                                   "(its folder or .onnx file, run in ONNX Runtime) (required)")
    p.add_argument("--input", help="CSV, TSV or JSONL file, or - for JSONL on stdin (required)")
    require(p, "model", "input")
    p.add_argument("--text-columns", help="the text column, or two comma-separated for pairs (default: the "
                                          "columns of the task the model was trained on, else text)")
    p.add_argument("--output", help="where the predictions go: JSONL, or CSV when it ends in .csv (default: stdout)")
    p.add_argument("--batch-size", type=int, default=64, help="rows per batch (rows are batched by length)")
    p.add_argument("--threads", type=int, help="CPU threads of ONNX Runtime (default: its own)")
