"""Observability shared by every Fairway process: Prometheus metrics (``metrics``), JSON logs
that never carry prompts, outputs or keys (``logfmt``), the metrics endpoint of the dispatcher
and the workers (``endpoint``) and the API's readiness checks (``health``).

See docs/observability.md.
"""
