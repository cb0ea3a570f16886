"""The API's observability: its request observer (TTFT, E2E, SLO outcome), HTTP counters,
/metrics and /readyz, and the Flower entry point. What every process shares sits in
service.store.telemetry. See docs/observability.md.
"""
