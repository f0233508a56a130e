# Sourced by scripts/demo and scripts/test: create or reuse .venv and install verticalfs into it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERTICALFS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "verticalfs needs Python >= 3.10; found $("$PY" --version 2>&1). Set PYTHON=/path/to/python3.10+." >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment in $VENV" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.verticalfs-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "installing verticalfs and its dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # torch first, pinned: a CPU wheel of exactly this version is provided on the target machines.
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev,bench,docs]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
if [ -z "${VERTICALFS_DATA:-}" ] && [ -d "$ROOT/../shared/datasets" ]; then
  export VERTICALFS_DATA="$(cd "$ROOT/../shared/datasets" && pwd)"
fi
cd "$ROOT"
