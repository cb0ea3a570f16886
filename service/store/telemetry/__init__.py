"""Telemetry every process shares: Prometheus metric definitions (``metrics``) and label
helpers (``labels``), whether metrics are on (``state``), rolling SLO windows (``slo``), the
metrics endpoint of the dispatcher and the workers (``endpoint``), and JSON logs that never
carry prompts, outputs or keys (``logfmt``, ``logs``). See docs/observability.md.
"""
