"""The import rules of hf-dr's layers, read from the source (every import statement, those inside
functions included) and checked on a fresh interpreter (what importing a layer loads):

- models import no training code (losses, objectives, training, adaptation, labelling, the CLI);
- retrieval imports no model loading: a factory above both (:mod:`hf_dr.factory`) builds
  retrievers from names;
- evaluation takes runs and retrievers, never builds one (only ``hf_dr.retrieval.run``'s helpers);
- the library never imports the CLI (``hf_dr.commands``, ``hf_dr.cli``);
- no module imports a private name from another package (adaptation from labelling...);
- ``StageCache`` is defined once, in :mod:`hf_dr.stage_cache`, and labelling and adaptation both
  use it from there;
- no module imports a layer above its own (:data:`LAYERS`, the picture in docs/development.md);
- one card renderer (:mod:`hf_dr.hub.cards`) and one path scrubber (:mod:`hf_dr.hub.paths`) in the
  whole repository.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "hf_dr"

TRAINING = ("hf_dr.losses", "hf_dr.objectives", "hf_dr.training", "hf_dr.adaptation", "hf_dr.labeling")
CLI = ("hf_dr.commands", "hf_dr.cli")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    p = PKG.parent / name.replace(".", "/")
    return p.is_dir() or p.with_suffix(".py").is_file()


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of every import of ``path`` (relative ones resolved); ``names``
    are what a ``from`` import takes (``[]`` for ``import x``)."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            out.append((target, names, node.lineno))
            # ``from . import x``: x may be a submodule
            out += [(f"{target}.{n}", [], node.lineno) for n in names if _is_module(f"{target}.{n}")]
    return out


def _files(*under: str) -> list[Path]:
    return sorted(p for u in under for p in ((PKG / u).rglob("*.py") if (PKG / u).is_dir() else [PKG / u]))


def _is(target: str, prefixes) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def _violations(files, forbidden, allowed=()) -> list[str]:
    return [f"{p.relative_to(REPO)}:{line} imports {t}" for p in files for t, _, line in _imports(p)
            if _is(t, forbidden) and not _is(t, allowed)]


def test_the_source_parses_as_the_rules_expect():
    """The checks below read what they should: relative imports resolve to hf_dr modules."""
    seen = {t for p in _files("losses.py") for t, _, _ in _imports(p)}
    assert "hf_dr.models.berm.modeling_berm" in seen
    seen = {t for p in _files("factory.py") for t, _, _ in _imports(p)}
    assert {"hf_dr.models", "hf_dr.retrieval.retriever", "hf_dr.evaluation"} <= seen


def test_models_import_no_training_code():
    assert _violations(_files("models"), TRAINING + CLI + ("hf_dr.factory",)) == []


def test_retrieval_imports_no_model_loading():
    """hf_dr.st_encoder is allowed: it wraps a Sentence Transformers object already loaded (an
    ``EncoderRetriever`` takes one), loads nothing, and imports no hf_dr.models (checked here)."""
    assert _violations(_files("retrieval", "st_encoder.py", "embeddings.py"),
                       ("hf_dr.models", "hf_dr.factory") + TRAINING + CLI) == []


def test_evaluation_never_builds_a_retriever():
    assert _violations(_files("evaluation.py", "metrics"),
                       ("hf_dr.retrieval", "hf_dr.models", "hf_dr.factory", "hf_dr.st_encoder") + TRAINING + CLI,
                       allowed=("hf_dr.retrieval.run",)) == []


def test_the_library_never_imports_the_cli():
    lib = [p for p in _files(".") if not _is(_module(p), CLI)]
    assert _violations(lib, CLI) == []


def test_no_private_name_is_imported_from_another_package():
    bad = []
    for p in _files("."):
        package = _module(p) if p.name == "__init__.py" else _module(p).rpartition(".")[0]
        for target, names, line in _imports(p):
            if not target.startswith("hf_dr"):
                continue
            owner = target if (PKG.parent / target.replace(".", "/")).is_dir() else target.rpartition(".")[0]
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and owner != package:
                bad.append(f"{p.relative_to(REPO)}:{line} imports {', '.join(private)} from {target}")
    assert bad == []


def test_stage_cache_is_one_class_used_by_labelling_and_adaptation():
    defined = [p.relative_to(REPO).as_posix() for p in _files(".")
               for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ClassDef) and n.name == "StageCache"]
    assert defined == ["hf_dr/stage_cache.py"]
    for layer in ("labeling", "adaptation"):
        users = [p for p in _files(layer) for t, names, _ in _imports(p)
                 if t == "hf_dr.stage_cache" and "StageCache" in names]
        assert users, f"hf_dr/{layer} does not use hf_dr.stage_cache.StageCache"


def _repo_sources() -> list[Path]:
    dirs = ["hf_dr", "examples", "benchmarks", "dataset_builders", "spaces"]
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts)


def test_one_card_renderer_and_one_path_scrubber():
    """Cards are rendered only by hf_dr.hub.cards (huggingface_hub's jinja ``from_template``), local
    paths scrubbed only by hf_dr.hub.paths: no other module of the repository makes its own."""
    renderers, scrubbers = [], []
    for p in _repo_sources():
        rel = p.relative_to(REPO).as_posix()
        tree = ast.parse(p.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr == "from_template" and rel != "hf_dr/hub/cards.py":
                renderers.append(f"{rel}:{n.lineno}")
            if isinstance(n, ast.ImportFrom) and n.module == "huggingface_hub" and rel != "hf_dr/hub/cards.py" \
                    and {a.name for a in n.names} & {"ModelCard", "DatasetCard", "ModelCardData", "DatasetCardData"}:
                renderers.append(f"{rel}:{n.lineno}")
            if isinstance(n, ast.FunctionDef) and rel != "hf_dr/hub/paths.py" and \
                    n.name.lstrip("_") in ("public_name", "public_values", "public_command", "public_configs",
                                           "scrub_local_paths", "path_roots"):
                scrubbers.append(f"{rel}:{n.lineno} {n.name}")
    assert renderers == [] and scrubbers == []


_LOADED = r"""
import importlib, pkgutil, sys
import hf_dr.{layer} as root
for m in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
    importlib.import_module(m.name)
print(" ".join(sorted(m for m in sys.modules if m.startswith("hf_dr."))))
"""


@pytest.mark.parametrize(("layer", "forbidden"), [("models", TRAINING + CLI + ("hf_dr.factory",)),
                                                  ("retrieval", ("hf_dr.models", "hf_dr.factory") + TRAINING + CLI)])
@pytest.mark.cli
def test_importing_a_layer_loads_none_of_what_it_must_not(layer, forbidden):
    """What importing every module of the layer loads, transitively, on a fresh interpreter."""
    r = subprocess.run([sys.executable, "-c", _LOADED.replace("{layer}", layer)], capture_output=True, text=True,
                       cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = r.stdout.split()
    assert f"hf_dr.{layer}" in loaded
    assert [m for m in loaded if _is(m, forbidden)] == []


#: hf-dr's layers, bottom first (docs/development.md draws them): a module imports its own layer and
#: those below it, never one above. Every module of the package has its place here.
LAYERS = (
    ("core", ("hf_dr.io", "hf_dr.extras", "hf_dr.stage_cache", "hf_dr.fingerprints", "hf_dr.shards", "hf_dr.devices",
              "hf_dr.precision", "hf_dr.encoding")),
    ("data, models, objectives", ("hf_dr.data", "hf_dr.ingest", "hf_dr.models", "hf_dr.st_encoder", "hf_dr.embeddings",
                                  "hf_dr.losses", "hf_dr.objectives")),
    ("search, metrics, training", ("hf_dr.retrieval", "hf_dr.evaluation", "hf_dr.metrics", "hf_dr.training")),
    ("queries, labels, factory, publishing", ("hf_dr.generation", "hf_dr.labeling", "hf_dr.analysis", "hf_dr.factory",
                                              "hf_dr.hub")),
    ("workflows", ("hf_dr.adaptation", "hf_dr.serving")),
    ("command line", ("hf_dr.commands", "hf_dr.cli")),
)


def _layer(module: str) -> int | None:
    return next((i for i, (_, prefixes) in enumerate(LAYERS) if _is(module, prefixes)), None)


def test_every_module_has_a_layer():
    """A new module is placed in LAYERS (and in docs/development.md's picture) when it is added."""
    unplaced = [_module(p) for p in PKG.rglob("*.py") if _module(p) != "hf_dr" and _layer(_module(p)) is None]
    assert unplaced == []


def test_no_layer_imports_a_layer_above_it():
    up = []
    for p in PKG.rglob("*.py"):
        own = _layer(_module(p))
        if own is None:
            continue
        for target, _, line in _imports(p):
            t = _layer(target)
            if t is not None and t > own:
                up.append(f"{p.relative_to(REPO)}:{line} ({LAYERS[own][0]}) imports {target} ({LAYERS[t][0]})")
    assert up == []


def test_the_picture_in_the_docs_names_every_layer():
    """docs/development.md's picture is drawn from LAYERS: each layer's packages appear in it."""
    doc = (REPO / "docs" / "development.md").read_text()
    missing = [p.removeprefix("hf_dr.") for _, prefixes in LAYERS for p in prefixes
               if p.removeprefix("hf_dr.") not in doc]
    assert missing == []


def _module_graph() -> dict[str, set[str]]:
    """``{module: the hf_dr modules it imports}`` (imports inside functions included; an import of a
    name from a package counts as an import of the package's ``__init__``)."""
    mods = {_module(p): p for p in PKG.rglob("*.py")}

    def owner(target: str) -> str:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target

    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for target, _, _ in _imports(p):
            if target.startswith("hf_dr.") and owner(target) not in ("", "hf_dr", m):
                graph[m].add(owner(target))
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_import_each_other():
    """No module of hf_dr imports itself back, directly or through others."""
    graph = _module_graph()
    assert "hf_dr.hub.cards" in graph and graph["hf_dr.labeling.pseudo_relevance"]
    assert _circles(graph) == []


#: the longest a function of hf_dr may be (lines, its docstring included)
MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines():
    long = [f"{p.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in sorted(PKG.rglob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
