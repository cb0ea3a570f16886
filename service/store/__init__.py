"""The floor every Fairway process stands on, and nothing else: settings, the database (base,
engines, sessions, migrations), the ORM models, the job lifecycle (the one module that changes
a job's status), the wake-up codec, Redis key names, the quota store, the Celery app's shared
configuration and telemetry (metrics, labels, logs).

It imports nothing above it and no web framework: the API, batches, files and admin stand on
it; the dispatcher and the workers use only it and the pure ``scheduler`` types. The layers are
an import-linter contract in pyproject.toml (``lint-imports`` runs with the tests).
"""
