"""The dispatcher process: binds the pure policy to Postgres (jobs), Redis (heartbeats) and
Celery (per-worker queues). The only I/O-doing part of ``scheduler``."""
