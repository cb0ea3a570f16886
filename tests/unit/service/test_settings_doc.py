"""docs/settings.md's settings table is the one generated from the settings classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.store import settings_doc
from service.store.settings import Settings, groups

REPO = Path(__file__).resolve().parents[3]
SETTINGS_DOC = REPO / "docs" / "settings.md"


def test_the_docs_table_is_the_generated_one() -> None:
    assert settings_doc.DEFAULT_TARGET == SETTINGS_DOC
    text = SETTINGS_DOC.read_text()
    current = text.partition(settings_doc.START + "\n")[2].partition(settings_doc.END)[0]
    assert current == settings_doc.markdown_table(), (
        f"docs/settings.md's settings table is stale; run: {settings_doc.REGENERATE}")
    assert settings_doc.main(["--check"]) == 0


def test_the_readme_links_the_table_and_does_not_copy_it() -> None:
    readme = (REPO / "README.md").read_text()
    assert "docs/settings.md" in readme
    assert settings_doc.START not in readme


def test_every_setting_has_a_row_with_a_meaning() -> None:
    rows = settings_doc.rows()
    count = len(Settings.model_fields) - len(groups())
    count += sum(len(group.model_fields) for group in groups().values())
    assert len(rows) == count == len({var for var, _, _, _ in rows})
    assert all(meaning for _, _, _, meaning in rows)
    assert rows_by_var()["FAIRWAY_ENGINE"][:3] == ("FAIRWAY_ENGINE", "engine.kind", "`vllm`")
    assert rows_by_var()["FAIRWAY_GUARD_CHUNK_TOKENS"][2] == "unset"
    assert rows_by_var()["FAIRWAY_DATA_DIR"][2] == "`~/.local/share/fairway`"


def rows_by_var() -> dict[str, tuple[str, str, str, str]]:
    return {row[0]: row for row in settings_doc.rows()}


def test_write_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "settings.md"
    doc.write_text(f"# x\n\n{settings_doc.START}\n| old |\n{settings_doc.END}\n\nafter\n")
    assert settings_doc.main(["--check", str(doc)]) == 1
    assert settings_doc.REGENERATE in capsys.readouterr().err
    assert settings_doc.main(["--write", str(doc)]) == 0
    assert settings_doc.main(["--check", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# x\n\n") and text.endswith(f"{settings_doc.END}\n\nafter\n")
    assert "| old |" not in text
    with pytest.raises(ValueError, match="markers"):
        settings_doc.replace_table("no markers here", "| t |\n")
