"""Re-derive README numbers: re-run the ``hf-dr ...`` command of each recorded row and check
its metrics against the recorded ones within a tolerance (pyserini-2CR style).

    python benchmarks/regress.py --table baselines --dataset scifact        # a slice
    python benchmarks/regress.py --table baselines --tolerance 0.002        # everything

Only rows whose command is an ``hf-dr evaluate`` call are re-run (they write metrics.json);
exit status 1 when any metric moved by more than the tolerance.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from render_readme import load_rows  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default="baselines")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--tolerance", type=float, default=0.002)
    a = ap.parse_args()
    rows = [r for r in load_rows() if r["table"] == a.table and r["command"].startswith("hf-dr evaluate")
            and (a.dataset is None or r.get("dataset") == a.dataset)]
    if not rows:
        print("no re-runnable rows match")
        return 1
    failed = 0
    for r in rows:
        with tempfile.TemporaryDirectory() as tmp:
            argv = [sys.executable, "-m", "hf_dr.cli"] + shlex.split(r["command"])[1:] + ["--output", tmp]
            subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True)
            got = json.loads((Path(tmp) / "metrics.json").read_text())["metrics"]
        for k, want in r["metrics"].items():
            ok = abs(got[k] - want) <= a.tolerance
            failed += not ok
            print(f"{'ok ' if ok else 'BAD'} {r['dataset']:8s} {r['system'][:45]:45s} {k:12s} "
                  f"recorded {want:.4f} now {got[k]:.4f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
