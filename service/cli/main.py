"""The `fairway` command line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from service.store.settings import (
    ApiSettings,
    DispatcherSettings,
    EngineSettings,
    Settings,
    WorkerSettings,
)


def _given(**options: object) -> dict[str, Any]:
    """The options given on the command line (argparse leaves the others None), to build a
    settings group with: ``ApiSettings(**_given(port=args.port))`` reads the environment for
    the rest, and for the port when none was given."""
    return {name: value for name, value in options.items() if value is not None}


def cmd_api(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app
    from service.store.telemetry.logs import configure_logging

    settings = Settings(api=ApiSettings(**_given(port=args.port)))
    configure_logging(settings.logging.level)  # uvicorn's own loggers then log JSON lines too
    uvicorn.run(create_app(settings), host=settings.api.host, port=settings.api.port,
                log_level=settings.logging.level.lower(), access_log=False, log_config=None)
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    from redis import Redis

    from scheduler.dispatcher.loop import Dispatcher
    from service.batches.maintenance import BatchMaintenance
    from service.store.telemetry.logs import configure_logging
    from service.webhooks.delivery import WebhookSender

    settings = Settings(dispatcher=DispatcherSettings(**_given(policy=args.policy)))
    configure_logging(settings.logging.level)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    batches = BatchMaintenance(settings, Redis.from_url(settings.redis_url))
    webhooks = WebhookSender(settings)
    try:
        Dispatcher(settings, upkeep=[batches.tick, webhooks.tick]).run(stop)
    finally:
        webhooks.close()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from service.store.telemetry.logs import configure_logging
    from worker.main import run_worker

    settings = Settings(engine=EngineSettings(**_given(kind=args.engine)),
                        worker=WorkerSettings(**_given(id=args.worker_id)))
    configure_logging(settings.logging.level)
    run_worker(settings)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from service.cli.stack import serve_stack

    return serve_stack(Settings(engine=EngineSettings(**_given(kind=args.engine)),
                                api=ApiSettings(**_given(port=args.port))))


def cmd_migrate(_: argparse.Namespace) -> int:
    from service.store.migrate import upgrade

    upgrade(Settings().database_url)
    print("database at head")
    return 0


def cmd_tenant_create(args: argparse.Namespace) -> int:
    from service.cli.bootstrap import create_tenant_with_key

    tenant_id, key = create_tenant_with_key(Settings(), args.name, tier=args.tier,
                                            weight=args.weight)
    print(f"tenant {args.name} ({tenant_id})\napi key (shown once): {key}")
    return 0


def cmd_key_create(args: argparse.Namespace) -> int:
    from service.cli.bootstrap import issue_key_for

    print(f"api key (shown once): {issue_key_for(Settings(), args.tenant, name=args.name)}")
    return 0


def cmd_model_prepare(_: argparse.Namespace) -> int:
    from worker.model_prep import ensure_default_model

    print(ensure_default_model())
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from scheduler.sim.cli import main as sim_main

    return sim_main(args.sim_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="serve the whole stack (embedded Postgres/Redis if unset)")
    up.add_argument("--engine", choices=["vllm", "sim"])
    up.add_argument("--port", type=int)
    up.set_defaults(func=cmd_up)

    api = sub.add_parser("api", help="run the API server")
    api.add_argument("--port", type=int)
    api.set_defaults(func=cmd_api)

    sched = sub.add_parser("scheduler", help="run a dispatcher (one active, others standby)")
    sched.add_argument("--policy", choices=["fcfs", "priority", "fairway"])
    sched.set_defaults(func=cmd_scheduler)

    work = sub.add_parser("worker", help="run a GPU worker (one engine)")
    work.add_argument("--engine", choices=["vllm", "sim"])
    work.add_argument("--worker-id")
    work.set_defaults(func=cmd_worker)

    sub.add_parser("migrate", help="upgrade the database to head").set_defaults(func=cmd_migrate)

    tenant = sub.add_parser("tenant", help="tenant admin").add_subparsers(dest="sub",
                                                                          required=True)
    tc = tenant.add_parser("create", help="create a tenant and issue its first key")
    tc.add_argument("name")
    tc.add_argument("--tier", default="standard")
    tc.add_argument("--weight", type=float, default=1.0)
    tc.set_defaults(func=cmd_tenant_create)

    key = sub.add_parser("key", help="API keys").add_subparsers(dest="sub", required=True)
    kc = key.add_parser("create", help="issue a key for a tenant")
    kc.add_argument("tenant")
    kc.add_argument("--name", default="default")
    kc.set_defaults(func=cmd_key_create)

    from service.cli.batch import add_parser as add_batch_parser

    add_batch_parser(sub)

    from service.cli.jobs import add_parser as add_jobs_parser

    add_jobs_parser(sub)

    from service.cli.chaos.cli import add_parser as add_chaos_parser

    add_chaos_parser(sub)

    sim = sub.add_parser("sim", help="run a scheduling scenario in simulated time "
                                     "(same as python -m scheduler.sim)")
    sim.add_argument("sim_args", nargs=argparse.REMAINDER)
    sim.set_defaults(func=cmd_sim)

    model = sub.add_parser("model", help="models").add_subparsers(dest="sub", required=True)
    model.add_parser("prepare", help="convert the default model once").set_defaults(
        func=cmd_model_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
