"""The HTTP kit every router uses: request dependencies and auth (``deps``), errors in
OpenAI's shape (``errors``) and the catalog of served models (``catalog``)."""
