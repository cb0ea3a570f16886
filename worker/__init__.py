"""Fairway GPU workers: a Celery worker hosting one inference engine (vLLM or the simulator)."""
