"""hf-dr's IR metrics as a Hugging Face ``evaluate`` module.

    import evaluate, hf_dr.metrics
    ir = evaluate.load(hf_dr.metrics.IR_METRICS_PATH)
    ir.compute(predictions=[run_json], references=[qrels_json])

The module is a thin wrapper over :func:`hf_dr.evaluation.evaluate_run` (pytrec_eval): one
metric path, two front doors.
"""

from pathlib import Path

IR_METRICS_PATH = str(Path(__file__).resolve().parent / "ir_metrics.py")

__all__ = ["IR_METRICS_PATH"]
