"""Fairway's API service: the system of record (Postgres models), routes, auth and CLI."""
