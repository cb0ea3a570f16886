"""The README's current results table, generated from docs/results/current.json.

    python -m bench.results_table                              # rewrite README.md's table
    python -m bench.results_table --check                      # exit 1 if README.md's is stale
    python -m bench.results_table --set BENCH FIGURE MET       # record a bench's latest figure

docs/results/current.json is the single source: a list of rows, one per headline bench, each
with ``bench`` (its name, the key), ``command`` (how to run it), ``figure`` (the latest measured
value, short), ``target`` and ``met`` (one of ``yes``, ``no``, ``partly``, ``n/a``), and
optionally ``details`` (the docs/results page that holds its dated runs, linked from the bench
cell). The README holds a rendered copy between the markers; a unit test fails while the two
differ. A bench records its own figure with `record` (or the ``--set`` command line), which
rewrites both files; its dated run goes to its docs/results page by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from service.store.settings_doc import replace_table as replace_between
from service.store.settings_doc import table_cell

ROOT = Path(__file__).resolve().parents[1]
CURRENT = ROOT / "docs" / "results" / "current.json"
README = ROOT / "README.md"
START = "<!-- results-table:start -->"
END = "<!-- results-table:end -->"
MET = ("yes", "no", "partly", "n/a")
REGENERATE = "python -m bench.results_table"


@dataclass(frozen=True)
class Row:
    bench: str
    command: str
    figure: str
    target: str
    met: str
    details: str = ""

    def __post_init__(self) -> None:
        if self.met not in MET:
            raise ValueError(f"{self.bench}: met is {self.met!r}, not one of {', '.join(MET)}")


def load(path: Path = CURRENT) -> list[Row]:
    """The rows of ``path``, in their order."""
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of rows")
    rows = [Row(**item) for item in data]
    names = [row.bench for row in rows]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: a bench has two rows")
    return rows


def save(rows: list[Row], path: Path = CURRENT) -> None:
    items = [{k: v for k, v in asdict(row).items() if k != "details" or v} for row in rows]
    path.write_text(json.dumps(items, indent=2, ensure_ascii=False) + "\n")


def markdown_table(rows: list[Row]) -> str:
    lines = ["| bench | command | figure | target | met? |", "|---|---|---|---|---|"]
    for row in rows:
        bench = f"[{row.bench}]({row.details})" if row.details else row.bench
        lines.append(f"| {table_cell(bench)} | `{table_cell(row.command)}` "
                     f"| {table_cell(row.figure)} | {table_cell(row.target)} | {row.met} |")
    return "\n".join(lines) + "\n"


def replace_table(text: str, table: str) -> str:
    """``text`` with the README's results table replaced by ``table``."""
    return replace_between(text, table, START, END)


def render(readme_text: str, rows: list[Row]) -> str:
    return replace_table(readme_text, markdown_table(rows))


def is_current(current: Path = CURRENT, readme: Path = README) -> bool:
    text = readme.read_text()
    return render(text, load(current)) == text


def write(current: Path = CURRENT, readme: Path = README) -> None:
    text = readme.read_text()
    new = render(text, load(current))
    if new != text:
        readme.write_text(new)


def record(bench: str, figure: str, met: bool | str, *, current: Path = CURRENT,
           readme: Path = README) -> None:
    """Set ``bench``'s latest figure and verdict (True: ``yes``, False: ``no``) in
    ``current`` and rewrite the README's table. The bench must already have a row."""
    verdict = ("yes" if met else "no") if isinstance(met, bool) else met
    rows = load(current)
    if bench not in {row.bench for row in rows}:
        raise KeyError(f"{bench}: no such row in {current} (add it there first)")
    rows = [replace(row, figure=figure, met=verdict) if row.bench == bench else row
            for row in rows]
    save(rows, current)
    write(current, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.results_table",
                                     description="the README's current results table")
    parser.add_argument("--current", type=Path, default=CURRENT, help="the rows (JSON)")
    parser.add_argument("--readme", type=Path, default=README, help="the page with the markers")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true",
                        help="exit 1 if the page's table differs from the rows")
    action.add_argument("--set", nargs=3, metavar=("BENCH", "FIGURE", "MET"),
                        help=f"record BENCH's latest FIGURE and MET ({', '.join(MET)})")
    args = parser.parse_args(argv)
    try:
        if args.check:
            if not is_current(args.current, args.readme):
                print(f"{args.readme}: the results table is stale; run: {REGENERATE}",
                      file=sys.stderr)
                return 1
            return 0
        if args.set:
            bench, figure, met = args.set
            record(bench, figure, met, current=args.current, readme=args.readme)
            return 0
        write(args.current, args.readme)
    except (KeyError, ValueError) as exc:
        print(f"results_table: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
