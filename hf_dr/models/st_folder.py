"""The Sentence Transformers files of a saved hf-dr model ("Sentence Transformers out").

Every model hf-dr writes that Sentence Transformers can express is also a Sentence Transformers
folder: ``SentenceTransformer(folder)`` (dense, BERM) or ``SparseEncoder(folder)`` (SPLADE,
SPLADE-CAI) loads it and encodes queries and documents as hf-dr does — the same pooling,
normalisation, prompts, similarity and query / document max lengths. The files are written beside
the ones hf-dr and ``AutoModel(..., trust_remote_code=True)`` load, which stay as they are.

* A dense model whose weights are a plain backbone (``DenseEncoder``) is the folder's root:
  ``modules.json`` + ``sentence_bert_config.json`` + ``1_Pooling/`` (+ ``2_Normalize/``).
* A composite model (``BERMEncoder``: ``backbone.*``; ``SPLADECAI``: ``mlm.*`` + ``idf``) keeps its
  own ``config.json`` at the root; the Sentence Transformers ``Transformer`` lives in
  ``0_Transformer/`` with the backbone's config and tokenizer, and its weights file is a hard link
  to the root's (the same bytes: nothing is stored twice on disk; where links are impossible it
  is a copy) read through transformers' ``key_mapping`` (``^backbone\\.`` / ``^mlm\\.`` -> ``""``).
  SPLADE-CAI's root weights are written as two shards — ``mlm.*`` and ``idf`` — so that each
  Sentence Transformers module links one of them whole.
* SPLADE-CAI with IDF on (``config.use_idf``) is a ``Router``: queries go through ``Transformer``
  (fill-mask) + ``SpladePooling``, documents through the same two modules (saved once) and
  :class:`~hf_dr.models.splade.splade_idf.SpladeIDF` (``idf ** idf_exponent``, Eq. 7). That module
  is not part of Sentence Transformers, so it travels as ``splade_idf.py`` and loading needs
  ``trust_remote_code=True`` — Sentence Transformers 6 asks for it for every module class outside
  its own package, an installed hf-dr included. SPLADE-Doc queries (``query_mode="bow"``) are a
  ``SparseStaticEmbedding`` of ones (the special tokens 0).

Module types are written with the names Sentence Transformers 5 used (``sentence_transformers.models.*``,
``sentence_transformers.sparse_encoder.models.*``), which Sentence Transformers 6 still resolves.
Separate query / document max lengths (``query_length`` / ``document_length``) need Sentence
Transformers 6; a folder whose lengths are equal does not use them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

__all__ = ["write_dense_modules", "write_splade_modules", "write_unsupported", "unsupported_reason",
           "sentence_transformers_class", "ST_IDF_MODULE", "ST_UNSUPPORTED_MODULE"]

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"
ROUTER = "sentence_transformers.models.Router"
MLM_TRANSFORMER = "sentence_transformers.sparse_encoder.models.MLMTransformer"
SPLADE_POOLING = "sentence_transformers.sparse_encoder.models.SpladePooling"
STATIC_EMBEDDING = "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding"
#: the class reference of the IDF module: ``splade_idf.py`` beside the model (trust_remote_code)
ST_IDF_MODULE = "splade_idf.SpladeIDF"

_SUB = "0_Transformer"
#: the one module of a folder Sentence Transformers cannot express: loading it raises the reason
ST_UNSUPPORTED_MODULE = "sentence_transformers_unsupported.Unsupported"
_UNSUPPORTED_FILE = "sentence_transformers_unsupported.py"
_UNSUPPORTED_CODE = '''"""Written by hf-dr: Sentence Transformers cannot express the model saved in this folder."""

REASON = {reason!r}


class Unsupported:
    """Loading this module says, in one sentence, why the folder is not a Sentence Transformers model."""

    @classmethod
    def load(cls, *args, **kwargs):
        raise ValueError(REASON)
'''


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def _link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (one copy on disk), a copy where links are impossible."""
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _st_config(out: Path, model_type: str, prompts: dict, default_prompt_name: str | None,
               similarity_fn_name: str) -> None:
    _write_json(out / "config_sentence_transformers.json",
                {"model_type": model_type, "prompts": prompts, "default_prompt_name": default_prompt_name,
                 "similarity_fn_name": similarity_fn_name})


def _lengths(doc_length: int, query_length: int | None) -> dict:
    """``sentence_bert_config.json``'s lengths: ``max_seq_length`` (documents, and ``encode``), plus
    ``query_length`` / ``document_length`` only when queries are cut elsewhere (Sentence Transformers 6)."""
    out = {"max_seq_length": int(doc_length)}
    if query_length is not None and int(query_length) != int(doc_length):
        out.update(query_length=int(query_length), document_length=int(doc_length))
    return out


def _transformer_dir(out: Path, backbone_config, tokenizer, weights: list[tuple[Path, str]], prefix: str,
                     lengths: dict, extra: dict | None = None) -> Path:
    """``out/0_Transformer``: the backbone's config and tokenizer, ``weights`` linked in
    (``[(file of the root, name here)]``), read with ``key_mapping`` ``^prefix`` -> ``""``."""
    sub = out / _SUB
    if sub.exists():
        shutil.rmtree(sub)
    sub.mkdir(parents=True)
    backbone_config.save_pretrained(sub)
    tokenizer.save_pretrained(sub)
    for src, name in weights:
        _link(src, sub / name)
    _write_json(sub / "sentence_bert_config.json",
                {**lengths, "do_lower_case": False, **(extra or {}),
                 "model_args": {"key_mapping": {"^" + prefix.replace(".", "\\."): ""}}})
    return sub


def _root_weight_files(out: Path) -> list[Path]:
    index = out / "model.safetensors.index.json"
    if index.is_file():
        return [index, *sorted(out / f for f in set(json.loads(index.read_text())["weight_map"].values()))]
    single = out / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{out}: no model.safetensors to write the Sentence Transformers modules from")
    return [single]


# ---------------------------------------------------------------------------------------------- dense
def write_dense_modules(out: str | os.PathLike, *, hidden_size: int, pooling: str, normalize: bool,
                        max_length: int, max_query_length: int | None = None, prompts: dict | None = None,
                        default_prompt_name: str | None = None, similarity_fn_name: str | None = None,
                        backbone_config=None, tokenizer=None, weights_prefix: str | None = None) -> None:
    """The Sentence Transformers files of a dense bi-encoder saved in ``out``: Transformer ->
    Pooling (``pooling``) [-> Normalize], with its prompts and similarity (default: ``cosine`` when
    normalised, else ``dot``).

    Without ``weights_prefix`` the root of ``out`` is the Transformer (a plain backbone checkpoint:
    ``DenseEncoder``). With it (``"backbone."``: ``BERMEncoder``) the root keeps the model's own config
    and the Transformer is ``0_Transformer/`` (``backbone_config``, ``tokenizer``, the root's weights
    linked and read with that prefix removed)."""
    out = Path(out)
    lengths = _lengths(max_length, max_query_length)
    modules = []
    if weights_prefix is None:
        modules.append({"idx": 0, "name": "0", "path": "", "type": TRANSFORMER})
        _write_json(out / "sentence_bert_config.json", {**lengths, "do_lower_case": False})
    else:
        _transformer_dir(out, backbone_config, tokenizer, [(f, f.name) for f in _root_weight_files(out)],
                         weights_prefix, lengths)
        modules.append({"idx": 0, "name": "0", "path": _SUB, "type": TRANSFORMER})
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING})
    (out / "1_Pooling").mkdir(exist_ok=True)
    _write_json(out / "1_Pooling" / "config.json", {
        "word_embedding_dimension": int(hidden_size), "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False})
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": NORMALIZE})
        (out / "2_Normalize").mkdir(exist_ok=True)
    _write_json(out / "modules.json", modules)
    _st_config(out, "SentenceTransformer", prompts or {"query": "", "document": ""}, default_prompt_name,
               similarity_fn_name or ("cosine" if normalize else "dot"))


# --------------------------------------------------------------------------------------------- SPLADE
def _shard_splade_weights(out: Path) -> tuple[Path, Path]:
    """The root weights of a saved SPLADECAI as two shards (``mlm.*``, ``idf``) + their index:
    what ``from_pretrained`` reads as before, and two files the Sentence Transformers modules link."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    files = [f for f in _root_weight_files(out) if f.suffix == ".safetensors"]
    state = {}
    for f in files:
        with safe_open(str(f), framework="pt") as g:
            state.update({k: g.get_tensor(k) for k in g.keys()})
    if "idf" not in state:
        raise ValueError(f"{out}: the SPLADE-CAI weights hold no idf buffer")
    for f in _root_weight_files(out):
        f.unlink()
    mlm_file, idf_file = out / "model-00001-of-00002.safetensors", out / "model-00002-of-00002.safetensors"
    mlm = {k: v.contiguous() for k, v in state.items() if k != "idf"}
    save_file(mlm, str(mlm_file), metadata={"format": "pt"})
    save_file({"idf": state["idf"].contiguous()}, str(idf_file), metadata={"format": "pt"})
    total = sum(v.numel() * v.element_size() for v in state.values())
    _write_json(out / "model.safetensors.index.json",
                {"metadata": {"total_size": total},
                 "weight_map": {k: (idf_file if k == "idf" else mlm_file).name for k in sorted(state)}})
    return mlm_file, idf_file


def write_splade_modules(out: str | os.PathLike, model) -> str | None:
    """The Sentence Transformers files of the ``SPLADECAI`` ``model`` saved in ``out`` (its root
    weights are re-written as two shards, read as before by ``from_pretrained``). Returns ``None``,
    or why the model cannot be expressed (nothing is written then)."""
    import torch

    out = Path(out)
    cfg = model.config
    tok = model.tokenizer
    if tok is None:
        return "the model has no tokenizer"
    V = int(cfg.backbone_config.vocab_size)
    bow = cfg.query_mode == "bow"
    if bow and len(tok.get_vocab()) != V:
        return (f"its SPLADE-Doc queries are a bag of tokens over {V} dimensions, but the tokenizer has "
                f"{len(tok.get_vocab())} tokens (Sentence Transformers' SparseStaticEmbedding has one weight per token)")
    q_len = model.encoding_settings(is_query=True)["max_length"] if hasattr(model, "encoding_settings") \
        else cfg.max_query_length
    d_len = model.encoding_settings(is_query=False)["max_length"] if hasattr(model, "encoding_settings") \
        else cfg.max_doc_length
    mlm_file, idf_file = _shard_splade_weights(out)
    backbone = cfg.backbone_config
    _transformer_dir(out, backbone, tok, [(mlm_file, "model.safetensors")], "mlm.",
                     _lengths(d_len, None if bow else q_len))
    pool = "1_SpladePooling"
    (out / pool).mkdir(exist_ok=True)
    _write_json(out / pool / "config.json", {"pooling_strategy": "max", "activation_function": "relu",
                                             "word_embedding_dimension": V})
    prompts = {"query": getattr(model, "query_prefix", None) or "", "document": getattr(model, "doc_prefix", None) or ""}
    _st_config(out, "SparseEncoder", prompts, None, "dot")
    use_idf = bool(cfg.use_idf)
    if not use_idf and not bow:
        _write_json(out / "modules.json", [{"idx": 0, "name": "0", "path": _SUB, "type": MLM_TRANSFORMER},
                                           {"idx": 1, "name": "1", "path": pool, "type": SPLADE_POOLING}])
        return None
    types = {_SUB: MLM_TRANSFORMER, pool: SPLADE_POOLING}
    document = [_SUB, pool]
    query = [_SUB, pool]
    if use_idf:
        import inspect

        from .splade.splade_idf import SpladeIDF

        idf = "2_SpladeIDF"
        (out / idf).mkdir(exist_ok=True)
        _write_json(out / idf / "config.json", {"vocab_size": V, "idf_exponent": float(cfg.idf_exponent)})
        _link(idf_file, out / idf / "model.safetensors")
        shutil.copy2(inspect.getfile(SpladeIDF), out / "splade_idf.py")
        types[idf] = ST_IDF_MODULE
        document.append(idf)
    if bow:
        from safetensors.torch import save_file

        static = "0_SparseStaticEmbedding"
        (out / static).mkdir(exist_ok=True)
        tok.save_pretrained(out / static)
        # the query's tokens without special tokens, cut where hf-dr's max_query_length cuts them
        cut = q_len - tok.num_special_tokens_to_add()
        tcfg_file = out / static / "tokenizer_config.json"
        tcfg = json.loads(tcfg_file.read_text())
        tcfg["model_max_length"] = cut
        _write_json(tcfg_file, tcfg)
        weight = torch.ones(V)
        specials = {cfg.backbone_config.pad_token_id, tok.cls_token_id, tok.sep_token_id}
        weight[[i for i in specials if i is not None]] = 0.0
        save_file({"weight": weight}, str(out / static / "model.safetensors"), metadata={"format": "pt"})
        _write_json(out / static / "config.json", {"frozen": True})
        types[static] = STATIC_EMBEDDING
        query = [static]
    # the document route first: a Router's ``tokenizer`` (and what reads it) is its first route's
    _write_json(out / "router_config.json", {
        "types": types, "structure": {"document": document, "query": query},
        "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}}})
    _write_json(out / "modules.json", [{"idx": 0, "name": "0", "path": "", "type": ROUTER}])
    return None


def write_unsupported(out: str | os.PathLike, why: str) -> None:
    """Mark ``out`` as a folder Sentence Transformers cannot load: ``modules.json`` names one module
    whose loading raises ``ValueError`` with one sentence (``why``, and how to load the folder instead),
    so ``SentenceTransformer(out)`` fails with that sentence rather than inside another library (with
    ``trust_remote_code=False`` Sentence Transformers first asks for it, naming the module)."""
    out = Path(out)
    for stale in ("sentence_bert_config.json", "config_sentence_transformers.json", "router_config.json"):
        (out / stale).unlink(missing_ok=True)
    reason = (f"Sentence Transformers cannot load the model in this folder: {why.rstrip('.')}. Load it with "
              f"AutoModel.from_pretrained(folder, trust_remote_code=True) or hf_dr.models.load_encoder(folder).")
    (out / _UNSUPPORTED_FILE).write_text(_UNSUPPORTED_CODE.format(reason=reason), encoding="utf-8")
    _write_json(out / "modules.json", [{"idx": 0, "name": "0", "path": "", "type": ST_UNSUPPORTED_MODULE}])


def unsupported_reason(folder: str | os.PathLike) -> str | None:
    """The sentence :func:`write_unsupported` left in ``folder``; ``None`` for any other folder."""
    f = Path(folder) / _UNSUPPORTED_FILE
    if not f.is_file():
        return None
    import ast

    for node in ast.parse(f.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["REASON"]:
            return ast.literal_eval(node.value)
    return None


def sentence_transformers_class(folder: str | os.PathLike) -> tuple[str, list[str], str | None] | None:
    """``(class name, module classes of its own, similarity_fn_name)`` of a folder with Sentence
    Transformers files (``SentenceTransformer`` / ``SparseEncoder``; module classes outside
    ``sentence_transformers.*`` need ``trust_remote_code=True``); ``None`` without ``modules.json``."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file():
        return None
    try:
        st = json.loads((folder / "config_sentence_transformers.json").read_text())
    except (OSError, ValueError):
        st = {}
    types = [m.get("type", "") for m in json.loads((folder / "modules.json").read_text())]
    if types == [ST_UNSUPPORTED_MODULE]:
        return None
    if (folder / "router_config.json").is_file():
        types += list(json.loads((folder / "router_config.json").read_text()).get("types", {}).values())
    remote = sorted({t for t in types if not t.startswith("sentence_transformers.")})
    return st.get("model_type") or "SentenceTransformer", remote, st.get("similarity_fn_name")
