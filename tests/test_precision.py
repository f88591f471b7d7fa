"""Mixed precision: ``--dtype auto|fp32|bf16|fp16`` for encoding and training.

The GPU paths are run on CPU under ``torch.autocast("cpu", ...)``. CPU autocast keeps LayerNorm in
the autocast dtype while CUDA autocast returns it in float32 (``layer_norm`` is on CUDA's fp32
list): :func:`cuda_layer_norm_policy` makes LayerNorm return float32 under autocast here too, so the
MLM head's projection sees what it sees on a GPU (float32 input, bf16/fp16 matmul).

Tolerances (measured on splade-tiny / all-MiniLM-L6-v2 and the tiny models, with margin):
bf16 keeps 8 mantissa bits (relative step 2^-8 = 0.4%), fp16 11 bits (0.05%), so
* SPLADE term weights (0 .. ~3): absolute 0.06 for bf16, 0.02 for fp16 (measured 0.038 / 0.0084);
  the query-document scores within 1% / 0.2% of the largest fp32 score (measured 0.40% / 0.031%),
  and the top document of each query unchanged;
* dense unit vectors: cosine to fp32 >= 0.9999 (bf16) / 0.99999 (fp16) (measured 1 - 1.4e-5 / 1 - 3e-7);
* the loss of one batch, every objective: within 2% (bf16) / 0.2% (fp16) of the fp32 loss (measured at
  most 0.6% / 0.02%, SPLADE Margin-MSE + FLOPS; the others 0.07% / 0.01% or less).
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from .conftest import MINILM, SPLADE_TINY, need

HALF = (torch.bfloat16, torch.float16)
# (term-weight atol, score rtol) per dtype
SPLADE_TOL = {torch.bfloat16: (0.06, 0.01), torch.float16: (0.02, 0.002)}
LOSS_RTOL = {torch.bfloat16: 0.02, torch.float16: 0.002}

DOCS = ["Vitamin D deficiency is associated with an increased risk of hip fractures in elderly women.",
        "Mitochondria produce most of the chemical energy needed to power the biochemical reactions of the cell.",
        "Aspirin taken daily lowers the risk of a first heart attack but raises the risk of bleeding.",
        "Tumour necrosis factor alpha is a cytokine involved in systemic inflammation.",
        "short doc",
        "Statins reduce LDL cholesterol and cardiovascular events in patients at high risk."]
QUERIES = ["vitamin D and fractures", "energy of the cell", "aspirin heart attack", "inflammation cytokine"]


@contextlib.contextmanager
def cuda_layer_norm_policy():
    """Under autocast, every LayerNorm returns float32, as CUDA autocast does."""
    def hook(module, inputs, output):
        return output.float() if torch.is_autocast_enabled("cpu") else output

    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: hook(m, i, o) if isinstance(m, torch.nn.LayerNorm) else o)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def pooling_branch(batched: bool):
    """Force the max-pooled decoder's whole-batch (GPU) or per-document (CPU) branch."""
    from hf_dr.models.splade import modeling_splade as ms

    orig = ms._MaxPooledDecoder.__init__

    def init(self, decoder, attention_mask, block, batched_=None):
        orig(self, decoder, attention_mask, block, batched)

    ms._MaxPooledDecoder.__init__ = init
    try:
        yield
    finally:
        ms._MaxPooledDecoder.__init__ = orig


@pytest.fixture(scope="module")
def splade_tiny():
    from hf_dr.models.splade import SPLADECAI

    return SPLADECAI.from_backbone(str(need(SPLADE_TINY))).eval()


@pytest.fixture(scope="module")
def minilm():
    from hf_dr.models import load_encoder

    return load_encoder(str(need(MINILM)), kind="dense").eval()


# ----------------------------------------------------------------------------- SPLADE encoding
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "per-document"])
@pytest.mark.parametrize("cuda_policy", [True, False], ids=["cuda-layernorm", "cpu-layernorm"])
@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.shared
def test_splade_encoding_under_autocast_matches_fp32(splade_tiny, dtype, batched, cuda_policy):
    """ACCEPTANCE: SPLADE through the max-pooled decoder under bf16/fp16 autocast gives the fp32
    term weights and ranking within the stated tolerance, in both branches."""
    m = splade_tiny
    with pooling_branch(batched):
        ref_d = m.encode_corpus(DOCS, dtype="fp32").toarray()
        ref_q = m.encode_queries(QUERIES, dtype="fp32").toarray()
        policy = cuda_layer_norm_policy() if cuda_policy else contextlib.nullcontext()
        with policy, torch.autocast("cpu", dtype=dtype):
            d = m.encode_corpus(DOCS, dtype="fp32").toarray()  # the outer autocast is the one in force
            q = m.encode_queries(QUERIES, dtype="fp32").toarray()
    atol, rtol = SPLADE_TOL[dtype]
    assert np.isfinite(d).all() and d.dtype == np.float32
    assert np.abs(d - ref_d).max() <= atol, np.abs(d - ref_d).max()
    assert np.abs(q - ref_q).max() <= atol
    assert (d[4] > 0).sum() > 0  # a short document keeps weights
    s, ref_s = q @ d.T, ref_q @ ref_d.T
    np.testing.assert_allclose(s, ref_s, rtol=rtol, atol=rtol * np.abs(ref_s).max())
    assert (s.argmax(1) == ref_s.argmax(1)).all()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.shared
def test_splade_encode_dtype_flag_autocasts_on_cpu(splade_tiny, dtype):
    """``dtype="bf16"`` / ``"fp16"`` really autocasts on CPU (not fp32 in disguise), within tolerance."""
    m = splade_tiny
    ref = m.encode_corpus(DOCS, dtype="fp32").toarray()
    out = m.encode_corpus(DOCS, dtype=dtype).toarray()
    atol, _ = SPLADE_TOL[getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype])]
    assert 0 < np.abs(out - ref).max() <= atol


def test_splade_pool_in_half_precision():
    """The dense pooling (``splade_pool`` over [B, L, |V|] logits, ``pool_vocab_block=0``) in bf16 /
    fp16: padding masked with the dtype's own minimum, no overflow, and equal to the float32 pooling."""
    from hf_dr.models.splade.modeling_splade import splade_pool

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 50, generator=g) * 4
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 1:] = 0
    ref = splade_pool(logits.clone(), mask)
    for dt in HALF:
        out = splade_pool(logits.to(dt).requires_grad_(), mask)
        assert out.dtype == dt and torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), ref, atol=0.05, rtol=0.02)


#: cosine of a 16-bit gradient with the fp32 one (the dense path's own: bf16 0.98-0.99, fp16 0.99999)
GRAD_COSINE = {torch.bfloat16: 0.95, torch.float16: 0.999}


@pytest.mark.parametrize("cuda_policy", [True, False], ids=["cuda-layernorm", "cpu-layernorm"])
@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.shared
def test_splade_training_projection_under_autocast(splade_tiny, dtype, cuda_policy):
    """The training path (the max-pooled projection with autograd) under bf16 / fp16 autocast, with
    LayerNorm handing over float32 as CUDA's autocast does or not: the fp32 term weights within
    SPLADE_TOL; float32, finite gradients pointing the fp32 gradients' way; and the same vectors and
    gradients as the dense projection (``pool_vocab_block=0``) in the same precision."""
    m = splade_tiny
    enc = m.tokenizer(DOCS[:4], padding=True, truncation=True, max_length=64, return_tensors="pt")
    emb = m.get_input_embeddings().weight
    old = m.config.pool_vocab_block

    def run(ctx, block):
        m.config.pool_vocab_block = block
        m.zero_grad(set_to_none=True)
        with ctx:
            out = m(enc["input_ids"], enc["attention_mask"])
        (out.float() * torch.linspace(0.5, 1.5, out.shape[-1])).sum().backward()
        return out.detach().float(), emb.grad.clone()

    def half():
        return torch.autocast("cpu", dtype=dtype)

    try:
        ref, g_ref = run(contextlib.nullcontext(), old)
        with cuda_layer_norm_policy() if cuda_policy else contextlib.nullcontext():
            out, g = run(half(), old)
            dense, g_dense = run(half(), 0)
    finally:
        m.config.pool_vocab_block = old
        m.zero_grad(set_to_none=True)
    cos = torch.nn.functional.cosine_similarity
    atol, _ = SPLADE_TOL[dtype]
    assert torch.isfinite(out).all() and (out - ref).abs().max() <= atol, (out - ref).abs().max()
    assert g.dtype == torch.float32 and torch.isfinite(g).all()
    assert cos(g.flatten(), g_ref.flatten(), dim=0) > GRAD_COSINE[dtype]
    assert (out - dense).abs().max() <= 1e-2 * dense.abs().max()
    assert cos(g.flatten(), g_dense.flatten(), dim=0) > 0.999


# ----------------------------------------------------------------------------- dense encoding
@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.shared
def test_dense_encoding_under_autocast_matches_fp32(minilm, dtype):
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    ref = minilm.encode_corpus(DOCS, dtype="fp32")
    out = minilm.encode_corpus(DOCS, dtype=name)
    with cuda_layer_norm_policy():
        out_gpu_policy = minilm.encode_corpus(DOCS, dtype=name)
    floor = 0.9999 if dtype == torch.bfloat16 else 0.99999
    for o in (out, out_gpu_policy):
        assert o.dtype == np.float32 and np.isfinite(o).all()
        assert not np.array_equal(o, ref)  # it really ran in 16 bits
        cos = (o * ref).sum(1) / np.linalg.norm(o, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() >= floor, cos.min()
    q_ref = minilm.encode_queries(QUERIES, dtype="fp32")
    q = minilm.encode_queries(QUERIES, dtype=name)
    assert ((q @ out.T).argmax(1) == (q_ref @ ref.T).argmax(1)).all()


@pytest.mark.shared
def test_encode_dtype_attribute_is_the_default(minilm):
    """``model.encode_dtype`` is used by every encode call that passes no dtype."""
    ref = minilm.encode_queries(QUERIES[:2])
    minilm.encode_dtype = "bf16"
    try:
        out = minilm.encode_queries(QUERIES[:2])
        explicit = minilm.encode_queries(QUERIES[:2], dtype="bf16")
    finally:
        minilm.encode_dtype = "auto"
    assert not np.array_equal(out, ref)
    np.testing.assert_array_equal(out, explicit)


# ----------------------------------------------------------------------------- dtype resolution
def test_resolve_dtype():
    from hf_dr.precision import canonical_dtype, dtype_name, resolve_dtype, training_precision

    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype(None, cpu) == torch.float32
    assert resolve_dtype("fp32", cpu) == resolve_dtype("float32", cpu) == torch.float32
    assert resolve_dtype("bf16", cpu) == resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_dtype("fp16", cpu) == resolve_dtype(torch.float16, cpu) == torch.float16
    assert dtype_name("auto", "cpu") == "fp32" and canonical_dtype("float16") == "fp16"
    with pytest.raises(ValueError, match="unknown dtype"):
        canonical_dtype("fp8")
    assert training_precision("fp32", cpu) == {} and training_precision("auto", cpu) == {}
    assert training_precision("bf16", cpu) == {"bf16": True, "use_cpu": True}
    with pytest.raises(ValueError, match="fp16 trains on a GPU only"):
        training_precision("fp16", cpu)
    if torch.cuda.is_available():  # pragma: no cover - GPU machines
        auto = resolve_dtype("auto", "cuda")
        assert auto == (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
        assert training_precision("fp16", "cuda") == {"fp16": True}


# ----------------------------------------------------------------------------- objectives
WORDS = ["alpha", "beta", "gamma", "delta"]
ROWS = [{"query": f"what is {w}", "pos": f"The weather is fine. {w} is a topic about {w}. Nothing else here.",
         "neg": [f"unrelated text number {i} about nothing.", f"another {WORDS[i - 1]} text."],
         "scores": [5.0, 1.0 + i, 0.5]} for i, w in enumerate(WORDS)]


@pytest.fixture(scope="module")
def objective_cases(tiny_bert_dir):
    """(name, model, objective, batch) for every objective of hf_dr.objectives."""
    from datasets import Dataset
    from transformers import AutoModelForMaskedLM

    from hf_dr.adaptation.mlm import RandomWindowMLMCollator
    from hf_dr.data import RetrievalCollator, UnitCollator
    from hf_dr.labeling.units import annotate_units
    from hf_dr.models import load_encoder
    from hf_dr.models.berm import BERMEncoder
    from hf_dr.models.splade import SPLADECAI
    from hf_dr.objectives import (BERMObjective, ContrastiveObjective, MarginMSEObjective, MLMObjective,
                                  RankNetObjective, SpladeObjective)

    torch.manual_seed(0)
    dense = load_encoder(str(tiny_bert_dir), kind="dense")
    splade = SPLADECAI.from_backbone(str(tiny_bert_dir))
    berm = BERMEncoder.from_backbone(str(tiny_bert_dir), max_doc_length=64)
    mlm = AutoModelForMaskedLM.from_pretrained(str(tiny_bert_dir))
    tok = dense.tokenizer
    plain = RetrievalCollator(tok, 16, 48, score_column=None)(ROWS)
    scored = RetrievalCollator(tok, 16, 48)(ROWS)
    units = UnitCollator(berm.tokenizer, 16, 64, score_column=None)(
        annotate_units(Dataset.from_list([{k: r[k] for k in ("query", "pos", "neg")} for r in ROWS]),
                       show_progress_bar=False).to_list())
    torch.manual_seed(0)
    docs = [{"input_ids": tok(r["pos"] + " " + r["neg"][0], add_special_tokens=False)["input_ids"]} for r in ROWS]
    mlm_batch = RandomWindowMLMCollator(tok, seed=0)(docs)
    spl = SpladeObjective(warmup_steps=0, scale=1.0)
    return [("contrastive", dense, ContrastiveObjective(scale=20.0), plain),
            ("margin-mse", dense, MarginMSEObjective(scale=20.0), scored),
            ("ranknet", dense, RankNetObjective(scale=20.0), plain),
            ("berm", berm, BERMObjective(scale=20.0), units),
            ("splade+flops", splade, spl, scored),
            ("splade+flops contrastive", splade, spl, plain),
            ("mlm", mlm, MLMObjective(), mlm_batch)]


def _loss_and_grads(model, objective, batch, dtype):
    model.eval()  # no dropout: fp32 and 16-bit runs see the same network
    model.zero_grad(set_to_none=True)
    ctx = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
    with ctx:
        loss, logs = objective(model, dict(batch))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return loss.detach(), logs, grads


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_every_objective_under_autocast(objective_cases, dtype):
    """Forward + backward of each objective under CPU autocast: a float32 loss, finite gradients,
    and the fp32 loss within LOSS_RTOL."""
    failures = []
    for name, model, objective, batch in objective_cases:
        ref, _, ref_grads = _loss_and_grads(model, objective, batch, None)
        loss, logs, grads = _loss_and_grads(model, objective, batch, dtype)
        assert loss.dtype == torch.float32, name
        assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads), name
        assert len(grads) == len(ref_grads) and len(grads) > 0, name
        assert all(torch.isfinite(torch.as_tensor(v)).all() for v in logs.values()), name
        rel = abs(loss.item() - ref.item()) / max(abs(ref.item()), 1e-3)
        if rel > LOSS_RTOL[dtype]:
            failures.append(f"{name}: {loss.item():.6f} vs fp32 {ref.item():.6f} (rel {rel:.4f})")
    assert not failures, failures


def test_scores_cannot_overflow_fp16():
    """Scores of large vectors times an inverse temperature exceed fp16's 65504: the losses compute
    them in float32 (autocast off) and stay finite."""
    from hf_dr.losses import contrastive_loss, flops_loss, group_scores, margin_mse_loss, ranknet_loss

    q = torch.full((2, 64), 40.0).half().requires_grad_()
    d = torch.full((4, 64), 40.0).half()
    with torch.autocast("cpu", dtype=torch.float16):
        s = group_scores(q, d, 20.0)
        assert s.dtype == torch.float32 and torch.isfinite(s).all() and s.max() > 65504
        for loss in (contrastive_loss(q, d, torch.tensor([0, 2]), 20.0),
                     margin_mse_loss(s[:, 0], s[:, 1], s[:, 0] * 0, s[:, 1] * 0), ranknet_loss(s[:, 0], s[:, 1])):
            assert loss.dtype == torch.float32 and torch.isfinite(loss)
        tiny = torch.full((4, 10), 1e-4).half()  # squares of 1e-4 underflow fp16 (1e-8 < 6e-8)
        assert flops_loss(tiny).item() == pytest.approx(10 * 1e-8, rel=0.01)


# ----------------------------------------------------------------------------- training
def _train_losses(tiny_bert_dir, tmp_path, dtype, steps=6, force_fp16_gpu_path=False):
    """Losses of a short RetrievalTrainer run (contrastive, tiny dense model) in ``dtype``."""
    from datasets import Dataset
    from transformers import set_seed

    from hf_dr.data import RetrievalCollator
    from hf_dr.models import load_encoder
    from hf_dr.objectives import ContrastiveObjective
    from hf_dr.precision import with_training_precision
    from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

    set_seed(0)
    model = load_encoder(str(tiny_bert_dir), kind="dense")
    rows = Dataset.from_list([{k: r[k] for k in ("query", "pos", "neg")} for r in ROWS] * 6)
    args = RetrievalTrainingArguments(output_dir=str(tmp_path / f"run-{dtype}"), max_steps=steps,
                                      per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
                                      save_strategy="no", seed=0, report_to=[], disable_tqdm=True,
                                      train_sampling_strategy="sequential", use_cpu=True)
    if not force_fp16_gpu_path:
        args = with_training_precision(args, dtype)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=rows,
                               data_collator=RetrievalCollator(model.tokenizer, 16, 48, score_column=None),
                               objective=ContrastiveObjective(scale=20.0))
    if force_fp16_gpu_path:
        # accelerate turns fp16 off on CPU; switch on what it sets up on a GPU: autocast(fp16) around
        # forward and a GradScaler (loss scaling, unscale before clipping, inf-skip of the step)
        acc = trainer.accelerator
        before = acc.state._mixed_precision  # a process-wide singleton: put back after the run
        acc.state._mixed_precision = "fp16"
        acc.native_amp = True
        acc.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        try:
            trainer.train()
        finally:
            acc.state._mixed_precision = before
        assert acc.scaler.get_scale() > 0
    else:
        trainer.train()
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


def test_trainer_bf16_on_cpu_follows_fp32(tiny_bert_dir, tmp_path):
    """``--dtype bf16`` on CPU: TrainingArguments(bf16=True, use_cpu=True), accelerate's CPU
    autocast; the loss curve follows fp32's from the same seed."""
    fp32 = _train_losses(tiny_bert_dir, tmp_path, "fp32")
    bf16 = _train_losses(tiny_bert_dir, tmp_path, "bf16")
    assert len(fp32) == len(bf16) == 6 and all(math.isfinite(x) for x in bf16)
    assert fp32 != bf16  # it really trained in bf16
    assert max(abs(a - b) for a, b in zip(fp32, bf16)) <= 0.05 * max(fp32), (fp32, bf16)


@pytest.mark.slow
def test_trainer_fp16_through_the_gpu_code_path(tiny_bert_dir, tmp_path):
    """fp16 training cannot run on CPU through the Trainer as configured (accelerate sets up neither
    autocast nor a GradScaler for fp16 on CPU, and training_precision refuses it); the accelerator is
    switched onto the GPU's path by hand: fp16 autocast around forward + GradScaler."""
    fp32 = _train_losses(tiny_bert_dir, tmp_path, "fp32")
    fp16 = _train_losses(tiny_bert_dir, tmp_path, "fp16", force_fp16_gpu_path=True)
    assert len(fp16) == 6 and all(math.isfinite(x) for x in fp16)
    assert fp32 != fp16
    assert max(abs(a - b) for a, b in zip(fp32, fp16)) <= 0.01 * max(fp32), (fp32, fp16)


# ----------------------------------------------------------------------------- command line
@pytest.mark.parametrize("command", [
    ["encode", "--data", "D", "--model", "M", "--output", "O"],
    ["evaluate", "--data", "D", "--retriever", "dense", "--model", "M"],
    ["label", "--data", "D", "--output", "O"],
    ["adapt", "--data", "D", "--model", "M", "--method", "dodress", "--output", "O"],
])
def test_every_command_takes_dtype(command, capsys):
    from hf_dr.cli import build_parser, main

    parser = build_parser()
    for value, want in (("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("float32", "fp32"), ("auto", "auto")):
        assert parser.parse_args(command + ["--dtype", value]).dtype == want
    assert parser.parse_args(command).dtype == "auto"
    assert main(command + ["--dtype", "fp8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dtype" in err[0] and "fp8" in err[0], err


@pytest.mark.pipeline
def test_adapt_refuses_fp16_training_on_cpu(tmp_path, capsys):
    from hf_dr.cli import main

    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a GPU trains in fp16")
    rc = main(["adapt", "--data", str(tmp_path / "nope"), "--model", "m", "--method", "dodress",
               "--output", str(tmp_path / "out"), "--dtype", "fp16"])
    err = capsys.readouterr().err
    assert rc == 2 and "fp16 trains on a GPU only" in err, err


def test_space_encodes_in_the_configured_dtype(monkeypatch, tiny_bert_dir):
    """The Space resolves HF_DR_DTYPE as --dtype does and sets it on every model it loads."""
    from .test_space import _load_app

    app = _load_app()
    monkeypatch.setenv("HF_DR_DTYPE", "bfloat16")
    cfg = app.SpaceConfig.from_env()
    assert cfg.dtype == "bf16"
    from hf_dr.models import load_encoder

    m = app.SearchEngine(cfg).model(("dense", "tiny"), lambda: load_encoder(str(tiny_bert_dir), kind="dense"))
    assert m.encode_dtype == "bf16"
    monkeypatch.setenv("HF_DR_DTYPE", "fp8")
    with pytest.raises(ValueError, match="unknown dtype"):
        app.SpaceConfig.from_env()
