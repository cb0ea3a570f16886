"""The `fairway` command line."""

from __future__ import annotations

import importlib
import os
import sys

from service.cli.child_processes import die_with_supervisor
from service.cli.errors import run_reporting_errors
from service.cli.options import Parser, add_global_options, split_global_options

# Each module adds its subcommands with `add_parser(sub)`; a new command group is one line.
COMMAND_MODULES = (
    "service.cli.processes",  # up, api, scheduler, worker, migrate, sim, model
    "service.cli.logs",  # logs
    "service.cli.admin",  # tenant, key
    "service.cli.plans",  # plan
    "service.cli.spend",  # price, spend, budget
    "service.cli.batch",  # batch
    "service.cli.adapters",  # adapter
    "service.cli.jobs",  # jobs
    "service.cli.job_show",  # job show (admin: any job or batch by id)
    "service.cli.usage",  # usage, limits
    "service.cli.chaos.cli",  # chaos
    "service.cli.replay.cli",  # bench replay
)


def build_parser() -> Parser:
    parser = Parser(prog="fairway", description=__doc__)
    add_global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    die_with_supervisor()  # a child of `fairway up` only
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    given, rest = split_global_options(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(rest, namespace=given)
    return run_reporting_errors(lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
