#!/usr/bin/env bash
# The README's test command: install (idempotent), lint, import layers, type-check, then every
# test tier.
# Needs PostgreSQL on 127.0.0.1:5432 (trust auth) and Redis on 127.0.0.1:6379; .ci/run starts
# them when they are down. Extra arguments go to pytest (e.g. -m "not e2e").
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/install.sh
venv=${FAIRWAY_VENV:-.venv}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export FAIRWAY_CHECKOV=${FAIRWAY_CHECKOV:-$(cd "$venv" && pwd)/checkov/bin/checkov}

"$venv/bin/ruff" check .
# The import layers (pyproject.toml, [tool.importlinter]); its report is printed only on failure.
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
"$venv/bin/mypy" --no-error-summary
"$venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$@"
