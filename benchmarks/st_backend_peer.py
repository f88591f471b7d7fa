"""The peer of ``benchmarks/speed.py --st-backend-python PY``: Sentence Transformers with one of its
CPU backends (``--backend onnx`` / ``openvino``), run by the Python of *another* environment.

Sentence Transformers' ONNX and OpenVINO backends cannot be installed beside hf-dr's dependencies
(``sentence-transformers[onnx]`` needs ``optimum-onnx``, which needs transformers < 4.58; the OpenVINO
extra replaces torch), so they are measured from an environment of their own, e.g.::

    python3 -m venv .venv-onnx
    .venv-onnx/bin/pip install torch==2.13.0 "sentence-transformers[onnx]"

This script is that environment's side: it loads the model with the backend (exporting it to ONNX on
the fly when the folder has no ``model.onnx``: not timed), then answers requests on stdin, one JSON
line each, with one JSON line on stdout:

* ``{"texts": [...], "batch_size": 32}`` -> ``{"done": n}``: one encode of the texts (the speed
  benchmark times the request, as it times hf-dr's encode call);
* ``{"texts": [...], "batch_size": 32, "save": PATH}`` -> the embeddings written to ``PATH`` (``.npy``,
  float32): the speed benchmark checks they are the model's.

It imports nothing of hf-dr (it runs where hf-dr is not installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="onnx", choices=["onnx", "openvino"])
    ap.add_argument("--max-length", type=int, default=None)
    a = ap.parse_args()
    import numpy as np
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    t = time.perf_counter()
    model = SentenceTransformer(a.model, backend=a.backend, device="cpu")
    if a.max_length:
        model.max_seq_length = a.max_length
    hello = {"ready": True, "load_seconds": round(time.perf_counter() - t, 2), "max_length": model.max_seq_length,
             "versions": {"sentence-transformers": sentence_transformers.__version__}}
    for name in ("onnxruntime", "openvino", "optimum", "transformers"):
        try:
            hello["versions"][name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a version is informative only
            pass
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if "save" in req:
            emb = model.encode(req["texts"], batch_size=req["batch_size"], show_progress_bar=False)
            np.save(req["save"], np.asarray(emb, dtype=np.float32))
            print(json.dumps({"saved": req["save"]}), flush=True)
            continue
        model.encode(req["texts"], batch_size=req["batch_size"], show_progress_bar=False)
        print(json.dumps({"done": len(req["texts"])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
