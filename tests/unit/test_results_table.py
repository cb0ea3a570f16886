"""bench/results_table.py: the README's current results table is the one docs/results/current.json
renders, rewriting it is idempotent, and a bench can record its figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import results_table

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_current() -> None:
    assert results_table.CURRENT == REPO / "docs" / "results" / "current.json"
    assert results_table.README == REPO / "README.md"
    assert results_table.is_current(), (
        f"README.md's results table differs from docs/results/current.json; run: "
        f"{results_table.REGENERATE}")
    assert results_table.main(["--check"]) == 0


def test_every_row_is_complete_and_links_a_page_that_exists() -> None:
    rows = results_table.load()
    assert rows
    for row in rows:
        assert row.bench and row.command and row.figure and row.target, row
        assert len(row.figure) <= 200, f"{row.bench}: keep the figure short"
        if row.details:
            assert (REPO / row.details).is_file(), row.details


def copies(tmp_path: Path) -> tuple[Path, Path]:
    current = tmp_path / "current.json"
    readme = tmp_path / "README.md"
    shutil.copy(results_table.CURRENT, current)
    shutil.copy(results_table.README, readme)
    return current, readme


def test_rewriting_is_idempotent(tmp_path: Path) -> None:
    current, readme = copies(tmp_path)
    results_table.write(current, readme)
    once = readme.read_text()
    results_table.write(current, readme)
    assert readme.read_text() == once
    rows = results_table.load(current)
    assert results_table.render(results_table.render(once, rows), rows) == once
    results_table.save(rows, current)
    assert current.read_text() == results_table.CURRENT.read_text()


def test_an_edit_to_one_side_only_is_caught(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    current, readme = copies(tmp_path)
    data = json.loads(current.read_text())
    data[0]["figure"] = "something else"
    current.write_text(json.dumps(data))
    args = ["--current", str(current), "--readme", str(readme)]
    assert results_table.main(["--check", *args]) == 1
    assert results_table.REGENERATE in capsys.readouterr().err
    assert results_table.main(args) == 0
    assert results_table.main(["--check", *args]) == 0
    assert "something else" in readme.read_text()
    text = readme.read_text()
    readme.write_text(text.replace("something else", "hand-edited"))
    assert results_table.main(["--check", *args]) == 1


def test_record_updates_one_row_and_the_readme(tmp_path: Path) -> None:
    current, readme = copies(tmp_path)
    before = results_table.load(current)
    bench = before[0].bench
    results_table.record(bench, "+1.0 ms | p99 +2 ms", True, current=current, readme=readme)
    after = results_table.load(current)
    assert after[0].figure == "+1.0 ms | p99 +2 ms" and after[0].met == "yes"
    assert after[1:] == before[1:]
    assert "+1.0 ms \\| p99 +2 ms" in readme.read_text()
    assert results_table.is_current(current, readme)
    args = ["--current", str(current), "--readme", str(readme)]
    assert results_table.main(["--set", bench, "x", "partly", *args]) == 0
    assert results_table.load(current)[0].met == "partly"
    assert results_table.main(["--set", "no-such-bench", "x", "no", *args]) == 2
    assert results_table.main(["--set", bench, "x", "maybe", *args]) == 2
    with pytest.raises(KeyError):
        results_table.record("no-such-bench", "x", False, current=current, readme=readme)


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="markers"):
        results_table.replace_table("no markers here", "| t |\n")
