"""Issue 28's gates on scpipe's GPU output: conformance/graph_steps.py's comparisons with
scanpy (umap-learn, leidenalg, rank_genes_groups) on files written by `scpipe run --device gpu`,
and the same seed twice giving the same X_umap and leiden labels bit for bit.

Usage (on the GPU machine, scanpy and its wheels on PYTHONPATH):
  python3 scripts/device/tests/graph_steps_gpu_gates.py OUT.h5ad [...] [--repeat A.h5ad B.h5ad]
Prints PASS/FAIL lines and 'N passed, N failed'; exits 1 on a failure.
"""

import os
import sys

import anndata as ad

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "conformance"))
from graph_steps import compare_graph_steps, compare_repeat  # noqa: E402


class Report:
    def __init__(self) -> None:
        self.passed = self.failed = 0

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        ok = bool(ok)
        self.passed += ok
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
        return ok


def main(argv: list[str]) -> int:
    rep = Report()
    repeat = []
    if "--repeat" in argv:
        i = argv.index("--repeat")
        repeat, argv = argv[i + 1 : i + 3], argv[:i] + argv[i + 3 :]
    for path in argv:
        compare_graph_steps(rep, f"gpu {os.path.basename(path)}", ad.read_h5ad(path))
    if repeat:
        first, second = (ad.read_h5ad(p) for p in repeat)
        compare_repeat(rep, f"gpu {os.path.basename(repeat[0])}", first, second)
    print(f"{rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
