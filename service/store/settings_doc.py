"""The settings table of docs/settings.md, generated from the settings classes
(`service.store.settings`).

    python -m service.store.settings_doc               # print the table
    python -m service.store.settings_doc --write       # into docs/settings.md, between the markers
    python -m service.store.settings_doc --check       # exit 1 where docs/settings.md differs
    python -m service.store.settings_doc --write FILE  # another file with the markers

One row per setting: its environment variable, where it lives in `Settings` (group.field),
its default and its meaning (the field's ``description``). A unit test keeps docs/settings.md's
copy equal to this one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from service.store.settings import Settings, env_var, groups

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
# The page that holds the table, from the repository root.
DEFAULT_TARGET = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
REGENERATE = "python -m service.store.settings_doc --write"


def rows() -> list[tuple[str, str, str, str]]:
    """(variable, setting, default, meaning) for every setting: the top level's, then each
    group's in declaration order."""
    grouped = groups()
    found = [_row(Settings, name, name, field) for name, field in Settings.model_fields.items()
             if name not in grouped]
    for group_name, group in grouped.items():
        found += [_row(group, name, f"{group_name}.{name}", field)
                  for name, field in group.model_fields.items()]
    return found


def _row(model: type[BaseSettings], name: str, setting: str,
         field: FieldInfo) -> tuple[str, str, str, str]:
    if not field.description:
        raise ValueError(f"{setting} has no description (Field(description=...))")
    return env_var(model, name), setting, _default(field), field.description


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Path) and value.is_relative_to(Path.home()):
        return f"`~/{value.relative_to(Path.home())}`"
    return f"`{value}`"


def markdown_table() -> str:
    lines = ["| variable | setting | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{var}` | `{setting}` | {default} | {table_cell(meaning)} |"
              for var, setting, default, meaning in rows()]
    return "\n".join(lines) + "\n"


def table_cell(text: str) -> str:
    """``text`` as one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def replace_table(text: str, table: str, start: str = START, end: str = END) -> str:
    """``text`` with what lies between the markers ``start`` and ``end`` replaced by
    ``table`` (a generated table kept in a hand-written page)."""
    head, sep, rest = text.partition(start + "\n")
    _old, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise ValueError(f"the markers {start} and {end} are missing")
    return head + sep + table + sep2 + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.store.settings_doc",
                                     description="the settings table (markdown)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--write", metavar="FILE", type=Path, nargs="?", const=DEFAULT_TARGET,
                        help="replace the table between the markers in FILE "
                             "(default: docs/settings.md)")
    target.add_argument("--check", metavar="FILE", type=Path, nargs="?", const=DEFAULT_TARGET,
                        help="exit 1 if FILE's table differs (default: docs/settings.md)")
    args = parser.parse_args(argv)
    table = markdown_table()
    if args.write is not None:
        text = args.write.read_text()
        args.write.write_text(replace_table(text, table))
        return 0
    if args.check is not None:
        text = args.check.read_text()
        if replace_table(text, table) != text:
            print(f"{args.check}: the settings table is stale; run: {REGENERATE}",
                  file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
