"""The CAI chain of SPLADE-CAI (papers/003, Figure 1): AdaLM (vocabulary expansion +
continual MLM) on the target corpus -> SPLADE training on source supervision -> IDF
fitted on the target corpus -> evaluation (SPLADE, + IDF, SPLADE-Doc, hybrids).

Every stage writes its own folder under ``output_dir`` with a ``DONE.json`` marker holding
its parameters; a re-run skips finished stages whose parameters match, so a crash loses
at most the stage in progress.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["CAIArguments", "run_cai", "evaluate_splade_variants"]


@dataclass
class CAIArguments:
    """Arguments of the CAI chain (``examples/train_splade_cai.py --help`` prints them)."""

    backbone: str = field(metadata={"help": "MLM checkpoint (folder or Hub id) SPLADE starts from"})
    target_data: str = field(metadata={"help": "BEIR folder / Hub id of the target domain (its corpus adapts the model)"})
    source_data: str = field(metadata={"help": "BEIR folder with graded qrels for supervised SPLADE training"})
    output_dir: str = field(metadata={"help": "where each stage is written"})
    source_split: str = field(default="test", metadata={"help": "qrels split of the source data"})
    target_split: str = field(default="test", metadata={"help": "qrels split evaluated on the target"})
    expand_vocabulary: bool = field(default=True, metadata={"help": "AdaLM vocabulary expansion (Algorithm 1)"})
    delta_v: int = field(default=3000, metadata={"help": "vocabulary increment per iteration"})
    max_vocab_iterations: int | None = field(default=None, metadata={"help": "cap on Algorithm 1 iterations"})
    continual_mlm: bool = field(default=True, metadata={"help": "continual MLM pre-training on the target corpus"})
    mlm_steps: int = field(default=1000, metadata={"help": "MLM optimisation steps"})
    mlm_batch_size: int = field(default=16)
    mlm_max_length: int = field(default=256)
    mlm_learning_rate: float = field(default=5e-5)
    train_splade: bool = field(default=True, metadata={"help": "SPLADE training on the source data"})
    splade_steps: int = field(default=1000)
    splade_batch_size: int = field(default=16, metadata={"help": "distinct queries per batch"})
    splade_learning_rate: float = field(default=2e-5)
    query_max_length: int = field(default=32)
    doc_max_length: int = field(default=128)
    lambda_q: float = field(default=0.08, metadata={"help": "FLOPS weight, queries (paper: 0.08)"})
    lambda_d: float = field(default=0.1, metadata={"help": "FLOPS weight, documents (paper: 0.1)"})
    flops_warmup_steps: int = field(default=1000, metadata={"help": "quadratic warm-up of the FLOPS weights"})
    idf_exponent: float = field(default=1.0, metadata={"help": "documents x IDF^e (1 = paper, 0.5 = authors' code)"})
    evaluate: bool = field(default=True, metadata={"help": "evaluate the final model on the target split"})
    seed: int = field(default=42)


def _stage(out: Path, name: str, params: dict):
    """(folder, done?) of a stage; done when its DONE.json holds the same parameters."""
    d = out / name
    marker = d / "DONE.json"
    if marker.is_file() and json.loads(marker.read_text()) == params:
        logger.info("stage %s already done in %s: skipped", name, d)
        return d, True
    return d, False


def _done(d: Path, params: dict) -> None:
    from ..io import atomic_write_json

    atomic_write_json(d / "DONE.json", params, indent=1)


def run_cai(a: CAIArguments, dtype: str | None = None) -> dict:
    """Run the chain; returns ``{"model_dir": ..., "metrics": {variant: {...}}}``. ``dtype`` (``auto`` |
    ``fp32`` | ``bf16`` | ``fp16``, :mod:`hf_dr.precision`): the Trainer's mixed precision of the MLM and
    SPLADE stages and the precision of the evaluation's encoding (``None``: fp32 training). Each stage
    is a folder of ``a.output_dir`` marked done (``DONE.json``) with its parameters: a re-run skips it."""
    from ..data import load_beir
    from ..precision import training_precision

    precision = training_precision(dtype) if dtype is not None else {}
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = load_beir(a.target_data, split=a.target_split)
    target_texts = target.doc_texts()
    current = a.backbone
    report: dict = {"args": asdict(a)}
    if a.expand_vocabulary:  # 1. AdaLM vocabulary expansion
        current, report["vocabulary"] = _vocabulary_stage(a, out, current, target_texts)
    if a.continual_mlm:  # 2. continual MLM on the target corpus
        current = _mlm_stage(a, out, current, target_texts, precision)
    if a.train_splade:  # 3. SPLADE training on the source supervision
        current = _splade_stage(a, out, current, precision)
    # 4. IDF on the target corpus (saved with the model, on by default)
    model = _final_stage(a, out, current, target_texts, dtype)
    report["model_dir"] = str(out / "final")
    if a.evaluate:
        report["metrics"] = evaluate_splade_variants(model, target)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def _vocabulary_stage(a: CAIArguments, out: Path, current: str, target_texts) -> tuple[str, dict]:
    """The AdaLM vocabulary expansion of ``current`` on the target corpus: its folder and report."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer, set_seed

    from .vocabulary import apply_vocabulary, expand_vocabulary, plot_entropy_curve

    params = {"from": current, "target": str(a.target_data), "delta_v": a.delta_v, "max_it": a.max_vocab_iterations}
    d, done = _stage(out, "1-vocabulary", params)
    if not done:
        set_seed(a.seed)  # every stage seeds itself: a resumed chain inits weights as a fresh one
        tok = AutoTokenizer.from_pretrained(current)
        ex = expand_vocabulary(tok, target_texts, delta_v=a.delta_v, max_iterations=a.max_vocab_iterations)
        model = AutoModelForMaskedLM.from_pretrained(current)
        model, new_tok = apply_vocabulary(model, tok, ex)
        d.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(d)
        new_tok.save_pretrained(d)
        plot_entropy_curve(ex, d / "entropy.png", title=f"AdaLM on {Path(str(a.target_data)).name}")
        (d / "expansion.json").write_text(json.dumps(
            {"original": len(tok), "final": ex.size, "added": len(ex.added), "sizes": ex.sizes,
             "entropies": ex.entropies, "first_added": ex.added[:50]}, indent=1))
        _done(d, params)
    return str(d), json.loads((d / "expansion.json").read_text())


def _mlm_stage(a: CAIArguments, out: Path, current: str, target_texts, precision: dict) -> str:
    """Continual MLM of ``current`` on the target corpus: its folder."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments, set_seed

    from .mlm import MLMArguments, train_mlm

    params = {"from": current, "target": str(a.target_data), "steps": a.mlm_steps, "bs": a.mlm_batch_size,
              "len": a.mlm_max_length, "lr": a.mlm_learning_rate, "seed": a.seed, **precision}
    d, done = _stage(out, "2-mlm", params)
    if not done:
        set_seed(a.seed)
        tok = AutoTokenizer.from_pretrained(current)
        model = AutoModelForMaskedLM.from_pretrained(current)
        targs = TrainingArguments(output_dir=str(d), max_steps=a.mlm_steps,
                                  per_device_train_batch_size=a.mlm_batch_size, learning_rate=a.mlm_learning_rate,
                                  warmup_steps=max(1, a.mlm_steps // 10),
                                  logging_steps=max(1, a.mlm_steps // 20), save_strategy="no", report_to="none",
                                  seed=a.seed, remove_unused_columns=False, **precision)
        trainer = train_mlm(model, tok, target_texts, targs, MLMArguments(max_length=a.mlm_max_length))
        (d / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
        _done(d, params)
    return str(d)


def _splade_stage(a: CAIArguments, out: Path, current: str, precision: dict) -> str:
    """SPLADE training of ``current`` on the source supervision (in-batch + hard-negative contrastive
    + FLOPS; Margin-MSE when the rows carry teacher scores): its folder."""
    from transformers import set_seed

    from ..data import RetrievalCollator, load_beir
    from ..data.qrels_triplets import triplets_from_qrels
    from ..models.splade import SPLADECAI
    from ..objectives import SpladeObjective
    from ..training import RetrievalTrainer, RetrievalTrainingArguments, final_output

    params = {"from": current, "source": str(a.source_data), "steps": a.splade_steps, "bs": a.splade_batch_size,
              "lr": a.splade_learning_rate, "lq": a.lambda_q, "ld": a.lambda_d, "warm": a.flops_warmup_steps,
              "qlen": a.query_max_length, "dlen": a.doc_max_length, "seed": a.seed, **precision}
    d, done = _stage(out, "3-splade", params)
    if done:
        return str(d)
    source = load_beir(a.source_data, split=a.source_split)
    set_seed(a.seed)
    model = SPLADECAI.from_backbone(current, max_query_length=a.query_max_length, max_doc_length=a.doc_max_length)
    per_epoch = triplets_from_qrels(source, batch_size=a.splade_batch_size, seed=a.seed)
    epochs = max(1, -(-a.splade_steps * a.splade_batch_size // max(1, len(per_epoch))))
    rows = triplets_from_qrels(source, batch_size=a.splade_batch_size, epochs=epochs, seed=a.seed)
    targs = RetrievalTrainingArguments(
        output_dir=str(d), max_steps=a.splade_steps, per_device_train_batch_size=a.splade_batch_size,
        learning_rate=a.splade_learning_rate, warmup_steps=max(1, a.splade_steps // 10),
        lr_scheduler_type="linear", logging_steps=max(1, a.splade_steps // 20), save_strategy="no",
        seed=a.seed, train_sampling_strategy="sequential", **precision)
    trainer = RetrievalTrainer(model=model, args=targs, train_dataset=rows,
                               data_collator=RetrievalCollator(model.tokenizer, a.query_max_length, a.doc_max_length),
                               objective=SpladeObjective(a.lambda_q, a.lambda_d, a.flops_warmup_steps))
    model.train()
    trainer.train()
    model.eval()
    with final_output(d) as tmp:
        model.save_pretrained(tmp)
    (d / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    _done(d, params)
    return str(d)


def _final_stage(a: CAIArguments, out: Path, current: str, target_texts, dtype: str | None):
    """The chain's model with IDF fitted on the target corpus, saved to ``out/final``."""
    from ..models.splade import SPLADECAI
    from ..training import final_output

    model = SPLADECAI.from_pretrained(current) if (Path(current) / "configuration_splade.py").exists() or \
        _is_splade_folder(current) else SPLADECAI.from_backbone(current)
    model.config.idf_exponent = a.idf_exponent
    model.fit_idf(target_texts)
    if dtype is not None:
        model.encode_dtype = dtype
    with final_output(out / "final") as tmp:
        model.save_pretrained(tmp)
    return model


def _is_splade_folder(path: str) -> bool:
    cfg = Path(path) / "config.json"
    return cfg.is_file() and json.loads(cfg.read_text()).get("model_type") == "splade_cai"


def evaluate_splade_variants(model, data, variants=("splade", "splade+idf", "splade-doc", "splade-doc+idf",
                                                    "hybrid", "hybrid+idf"), top_k: int = 1000,
                             extra_idf_exponents: tuple[float, ...] = (),
                             extra_bm25_stemmers: tuple[str | None, ...] = ()) -> dict:
    """nDCG@10 etc. of a SPLADECAI model on ``data`` in the paper's settings: full / BoW
    (SPLADE-Doc) queries, with / without IDF on documents, and BM25 + SPLADE by raw-score sum
    (Eq. 8-9). Documents are encoded once; IDF weighting is the retrievers' document transform
    on the stored vectors (identical to encoding with ``use_idf``). ``extra_idf_exponents`` adds the
    ``+idf`` variants again with ``idf ** e`` (e.g. 0.5, the authors' code), named ``"<variant> (idf^e)"``;
    ``extra_bm25_stemmers`` adds the hybrid variants again with BM25 under another stemmer
    (``None``: no stemming), named ``"<variant> (BM25 stemmer=s)"``.
    Also reports the mean number of non-zeros per query and per document (sparsity check)."""
    from ..evaluation import evaluate
    from ..retrieval import BM25Retriever, EncoderRetriever, HybridRetriever

    old = model.config.use_idf
    try:
        model.config.use_idf = False
        plain = model.encode_corpus(data.doc_texts(), show_progress_bar=True)
    finally:
        model.config.use_idf = old
    nnz_doc = float(plain.getnnz(axis=1).mean())  # IDF weighting keeps the non-zeros

    def idf(exponent: float):
        saved = model.config.idf_exponent
        model.config.idf_exponent = exponent
        w = model.idf_weights().cpu().numpy()[None, :]
        model.config.idf_exponent = saved
        return lambda docs: docs.multiply(w).tocsr()

    jobs = [(v, v, model.config.idf_exponent, "english") for v in variants]
    jobs += [(f"{v} (idf^{e:g})", v, e, "english") for e in extra_idf_exponents for v in variants if v.endswith("+idf")]
    jobs += [(f"{v} (BM25 stemmer={st})", v, model.config.idf_exponent, st) for st in extra_bm25_stemmers
             for v in variants if v.startswith("hybrid")]
    bm25: dict = {}
    nnz_query: dict = {}
    results: dict = {}
    for name, v, exponent, stemmer in jobs:
        mode = "bow" if v.startswith("splade-doc") else "splade"
        retriever = EncoderRetriever(model, plain, data.doc_ids(), query_settings={"query_mode": mode},
                                     doc_transform=idf(exponent) if v.endswith("+idf") else None)
        if mode not in nnz_query:
            nnz_query[mode] = float(retriever.encode_queries(list(data.split_queries().values())).getnnz(axis=1).mean())
        if v.startswith("hybrid"):
            if stemmer not in bm25:
                bm25[stemmer] = BM25Retriever.from_data(data, stemmer=stemmer)
            retriever = HybridRetriever([bm25[stemmer], retriever], method="sum", missing="zero")
        res = evaluate(retriever, data, k=top_k)
        results[name] = {**{m: round(x, 4) for m, x in res.aggregate.items()},
                         "nnz_query": nnz_query[mode], "nnz_doc": nnz_doc}
    return results
