"""Uploaded and generated files (the OpenAI Files API): rows in Postgres, bytes in storage."""
