"""Metrics of an API served by several worker processes behind one port (`fairway api
--workers N`): prometheus_client's multiprocess mode.

Behind one listening socket a scrape reaches whichever worker accepts it, so each worker's own
registry would be a random sample of the fleet: counters would jump back and forth between
workers' totals. In multiprocess mode every worker writes its samples to memory-mapped files in
one directory (``PROMETHEUS_MULTIPROC_DIR``), and any worker's /metrics merges them all:
counters and histograms add up, gauges merge by their ``multiprocess_mode`` (metrics.py).

prometheus_client picks its value storage when it is first imported, so the directory must be
in the environment before the workers start (``prepare_directory``, in the supervising process,
which never records a metric itself). A single-process API, the dispatcher and workers never
set it and keep their in-memory registry.

What does not merge, and is left out of the merged page: the SLO windows' gauges (each process
judges its own requests; the fleet's attainment is the ``fairway_slo_requests_total`` counters
in PromQL, as across pods) and the process collector's CPU and memory (per process by nature).

A worker that dies keeps its counters' and histograms' files, so totals never go backwards; its
live gauges (``livesum``, ``livemin``...) are dropped (``sweep_dead``) at the next scrape, so an
in-flight count it held does not stay in the sum.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

ENV = "PROMETHEUS_MULTIPROC_DIR"
_PID_IN_NAME = re.compile(r"_(\d+)\.db$")
_swept: set[int] = set()  # dead pids already swept by this process


def prepare_directory(path: str | None = None) -> str:
    """An empty directory for the workers' files, exported as ``PROMETHEUS_MULTIPROC_DIR`` for
    the processes started from here on: ``path`` (or the one already in the environment),
    emptied, since a previous run's counters would add to this one's; else a new temporary
    one."""
    chosen = path or os.environ.get(ENV)
    if chosen:
        shutil.rmtree(chosen, ignore_errors=True)
        Path(chosen).mkdir(parents=True, exist_ok=True)
    else:
        chosen = tempfile.mkdtemp(prefix="fairway-api-metrics-")
    os.environ[ENV] = chosen
    return chosen


def active() -> bool:
    """Whether this process writes its metrics to the shared directory."""
    return bool(os.environ.get(ENV))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    # A killed worker stays a zombie until the supervisor reaps it (up to its next check), and
    # a zombie still answers signal 0: it has written its last sample all the same.
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no procfs (or it just went): signal 0 said alive
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")".
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def pids_with_files(directory: str) -> set[int]:
    """The processes that wrote a file in ``directory``."""
    pids = set()
    for name in os.listdir(directory):
        match = _PID_IN_NAME.search(name)
        if match:
            pids.add(int(match.group(1)))
    return pids


def sweep_dead(directory: str) -> list[int]:
    """Drop the live gauges of the processes that wrote here and are gone (their counters and
    histograms stay: what they counted happened). Returns the pids swept now."""
    swept = []
    for pid in sorted(pids_with_files(directory) - _swept):
        if not _alive(pid):
            mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
            _swept.add(pid)
            swept.append(pid)
    return swept


def merged_registry() -> CollectorRegistry:
    """A registry that reads every process's files, after sweeping the dead ones' gauges."""
    directory = os.environ[ENV]
    sweep_dead(directory)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry
