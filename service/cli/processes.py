"""`fairway up` and the processes it supervises, which also run alone: `api`, `scheduler`,
`worker`; and `migrate`, `model prepare`, `sim`."""

from __future__ import annotations

import argparse
import signal
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


def add_parser(sub: Any) -> None:
    up = sub.add_parser("up", help="serve the whole stack (embedded Postgres/Redis if unset)")
    up.add_argument("--engine", choices=["vllm", "sim"],
                    help="the engine (default: $FAIRWAY_ENGINE, else vllm)")
    up.add_argument("--port", type=int, help="the API's port (default: $FAIRWAY_API_PORT, "
                                             "else 8000)")
    up.add_argument("--verbose", action="store_true",
                    help="stream the processes' logs here instead of into the data directory")
    up.set_defaults(func=cmd_up)

    api = sub.add_parser("api", help="run the API server")
    api.add_argument("--port", type=int, help="its port (default: $FAIRWAY_API_PORT, else 8000)")
    api.add_argument("--workers", type=int, default=1,
                     help="worker processes behind the one port (default 1); their metrics "
                          "merge (docs/observability.md)")
    api.set_defaults(func=cmd_api)

    sched = sub.add_parser("scheduler", help="run a dispatcher (one active, others standby)")
    sched.add_argument("--policy", choices=["fcfs", "priority", "fairway"],
                       help="the scheduling policy (default: $FAIRWAY_SCHEDULER_POLICY, else "
                            "fairway)")
    sched.set_defaults(func=cmd_scheduler)

    work = sub.add_parser("worker", help="run a GPU worker (one engine)")
    work.add_argument("--engine", choices=["vllm", "sim"],
                      help="the engine (default: $FAIRWAY_ENGINE, else vllm)")
    work.add_argument("--worker-id", help="its id (default: $FAIRWAY_WORKER_ID, else "
                                          "hostname-pid)")
    work.set_defaults(func=cmd_worker)

    sub.add_parser("migrate", help="upgrade the database to head").set_defaults(func=cmd_migrate)

    sim = sub.add_parser("sim", help="run a scheduling scenario in simulated time "
                                     "(same as python -m scheduler.sim)")
    sim.add_argument("sim_args", nargs=argparse.REMAINDER,
                     help="the simulator's arguments (see `fairway sim --help`)")
    sim.set_defaults(func=cmd_sim)

    model = sub.add_parser("model", help="models").add_subparsers(dest="sub", required=True)
    model.add_parser("prepare", help="convert the default model once").set_defaults(
        func=cmd_model_prepare)


def cmd_api(args: argparse.Namespace) -> int:
    from service.api.serve import serve

    serve(Settings(api=ApiSettings(**_given(port=args.port))), workers=args.workers)
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    from redis import Redis

    from scheduler.dispatcher.loop import Dispatcher
    from service.batches.maintenance import BatchMaintenance
    from service.spend.budgets import BudgetWatch
    from service.store.telemetry.gc_pauses import freeze_startup_heap
    from service.store.telemetry.logs import configure_logging
    from service.store.usage import UsageRollup
    from service.webhooks.delivery import WebhookSender

    settings = Settings(dispatcher=DispatcherSettings(**_given(policy=args.policy)))
    configure_logging(settings.logging.level)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    batches = BatchMaintenance(settings, Redis.from_url(settings.redis_url))
    webhooks = WebhookSender(settings)
    try:
        usage = UsageRollup(settings.database_url)
        budgets = BudgetWatch(settings.database_url, currency=settings.spend.currency,
                              every_s=settings.spend.budget_check_seconds)
        dispatcher = Dispatcher(settings, upkeep=[batches.tick, webhooks.tick, usage.tick,
                                                  budgets.tick])
        freeze_startup_heap("scheduler")
        dispatcher.run(stop)
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

    settings = Settings(engine=EngineSettings(**_given(kind=args.engine)),
                        api=ApiSettings(**_given(port=args.port)))
    if args.data_dir:
        settings = settings.with_changes(data_dir=args.data_dir)
    return serve_stack(settings, verbose=args.verbose)


def cmd_migrate(_: argparse.Namespace) -> int:
    from service.cli.errors import CLIError
    from service.store.migrate import upgrade

    url = Settings().database_url
    if not url:
        raise CLIError("FAIRWAY_DATABASE_URL is not set (`fairway up` migrates its embedded "
                       "database by itself)")
    upgrade(url)
    print("database at head")
    return 0


def cmd_model_prepare(_: argparse.Namespace) -> int:
    from worker.model_prep import ensure_default_model

    print(ensure_default_model())
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from scheduler.sim.cli import main as sim_main

    return sim_main(args.sim_args)
