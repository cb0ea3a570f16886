"""Fairway's scheduling policy (pure: plain objects in, decisions out, no I/O).

The dispatcher in ``scheduler.dispatcher`` is the only module here that talks to Postgres,
Redis or Celery; everything else is importable and testable without services.
"""
