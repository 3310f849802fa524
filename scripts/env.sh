# Sourced by ./scpipe and ./run-tests: makes sure a fresh machine has what the build needs.
# HDF5 is built from source (statically, the GPU machine has no libhdf5) and needs CMake >= 3.26,
# newer than Debian 12's; PyPI's `cmake` package gives it inside the project's own venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/cmake" --version >/dev/null 2>&1; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'cmake>=3.26,<5'
fi
export PATH="$VENV/bin:$PATH"
