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
# NVRTC 13.0 (a library, no GPU needed): sc-kernels/build.rs compiles every kernel ahead of time
# with it, so runs load CUBIN from the binary instead of compiling at first use. 13.0 so that
# any CUDA 13 driver loads what it makes.
# Not when SCPIPE_NVRTC is set (a path, or empty: `./scpipe` on a machine without NVIDIA's driver).
if [ -z "${SCPIPE_NVRTC+set}" ] \
    && ! compgen -G "$VENV/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13" >/dev/null; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'nvidia-cuda-nvrtc==13.0.*'
fi
export PATH="$VENV/bin:$PATH"
