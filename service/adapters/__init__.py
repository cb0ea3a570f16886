"""Tenants' LoRA adapters: upload, validation, the API and the resolution of ``ft:`` model names."""
