"""Batch inference (the OpenAI Batches API): validation, bulk job creation, results files."""
