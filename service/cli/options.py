"""The CLI's argument parsing: one-line usage errors, every option's default in --help, and
global options (`GLOBAL_OPTIONS`) accepted anywhere on the command line, before or after the
subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn


class HelpFormatter(argparse.HelpFormatter):
    """Says each option's default, except where there is none to say (None, a flag's False,
    or a help text that already names it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, argparse.SUPPRESS)
                or isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
                or (not action.option_strings and action.nargs not in ("?", "*"))):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An error is one line on stderr with exit code 2 (argparse's own prints the usage too).
    Subcommands' parsers are of this class too (argparse makes them with the parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if kwargs.get("prog", "fairway") != "fairway":  # a subcommand's
            kwargs.setdefault("epilog", "The global options (--base-url, --api-key, "
                                        "--admin-token, --data-dir) work here too: see "
                                        "`fairway --help`.")
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


# (flags, help): global options, valid anywhere on the line; each command reads what it needs.
GLOBAL_OPTIONS: tuple[tuple[str, str], ...] = (
    ("--base-url", "the API's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (default: "
                   "$OPENAI_BASE_URL, else the stack `fairway up` runs from the data "
                   "directory, else FAIRWAY_API_HOST:FAIRWAY_API_PORT)"),
    ("--api-key", "a tenant's API key (default: $OPENAI_API_KEY, else the demo key of the "
                  "running `fairway up`)"),
    ("--admin-token", "the admin credential (default: $FAIRWAY_ADMIN_TOKEN, else the running "
                      "`fairway up`'s)"),
    ("--data-dir", "the data directory `fairway up` uses (default: $FAIRWAY_DATA_DIR, else "
                   "~/.local/share/fairway)"),
)


def add_global_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("global options (anywhere on the command line)")
    for flag, text in GLOBAL_OPTIONS:
        group.add_argument(flag, default=argparse.SUPPRESS, help=text)


def split_global_options(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Takes the global options out of ``argv`` wherever they are; returns them (unset ones
    as None) and the rest, for the command's parser."""
    only = Parser(prog="fairway", add_help=False, allow_abbrev=False)
    for flag, _ in GLOBAL_OPTIONS:
        only.add_argument(flag, default=None, type=Path if flag == "--data-dir" else str)
    return only.parse_known_args(list(argv))
