"""The whole SPLADE-CAI chain: expand vocabulary -> continual MLM -> SPLADE training ->
fit IDF -> evaluate. Runs under `python` and `accelerate launch`.

    python examples/train_splade_cai.py --backbone ../shared/models/splade-tiny \
        --target_data ../shared/data/scifact --source_data ../shared/data/msmarco-trecdl2019 \
        --output_dir runs/cai-scifact --mlm_steps 300 --splade_steps 300 --flops_warmup_steps 100

Each stage is written under --output_dir and skipped on a re-run with the same parameters.
Ablations are flags: --expand_vocabulary false (continual pre-training only),
--continual_mlm false (vocabulary expansion only), both false (SPLADE training only).
Every stage sets ``--seed`` before it initialises weights, so a re-run (or a resumed chain)
gives the same model; stage folders and the final model are written atomically.
"""

import argparse
import json
import logging

from transformers import HfArgumentParser

from hf_dr.cli import add_dtype_argument
from hf_dr.io import one_line_warnings
from hf_dr.precision import training_precision
from hf_dr.adaptation.cai import CAIArguments, run_cai


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    one_line_warnings()
    parser = HfArgumentParser(CAIArguments, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype_argument(parser, "the MLM and SPLADE training (the Trainer's mixed precision) and the evaluation")
    args, extra = parser.parse_args_into_dataclasses()
    try:
        training_precision(extra.dtype)  # fp16 without a GPU: one line, exit 2, before any work
    except ValueError as e:
        parser.error(str(e))
    report = run_cai(args, dtype=extra.dtype)
    print(json.dumps(report.get("metrics", {}), indent=1))
    print(f"model: {report['model_dir']}")


if __name__ == "__main__":
    main()
