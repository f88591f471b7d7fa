"""Bad input, crashes and misuse: run each case as a user would, record what happens.

    python benchmarks/probes.py                 # -> benchmarks/results/probes.json, docs/robustness.md
    python benchmarks/probes.py --only push     # the cases whose name contains "push"

Each case runs real ``hf-dr`` commands (``python -m hf_dr.cli``, or an example script) in a fresh
work folder, with the bundled sample corpus and the offline models of ``../shared/models``, and the
Hub switched off (``HF_HUB_OFFLINE=1``). It records the exit status, the first line of the error
message (work-folder paths shown as ``WORK/``), whether a Python traceback reached the user, and
what the case checks afterwards (a file kept, weights identical, a cache recomputed ...). The
verdict is ``clear error`` (exit 2, a message, no traceback), ``correct`` (the right result) or
``FAIL``. The table in docs/robustness.md is rendered from the JSON by this script (and checked by
tests/test_readme_tables.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, SHARED, command_line, machine  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "hf_dr" / "data" / "sample" / "scifact-mini"
MINILM = SHARED / "models" / "all-MiniLM-L6-v2"
SPLADE = SHARED / "models" / "splade-tiny"
DOC = REPO / "docs" / "robustness.md"
BEGIN, END = "<!-- probes -->", "<!-- /probes -->"


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float


class Work:
    """A fresh folder with the sample corpus as ``data/`` and helpers to run commands in it."""

    def __init__(self, root: Path):
        self.root = root
        shutil.copytree(SAMPLE, root / "data")
        # training queries for hf-dr label (the sample has test judgments only; labels are never read)
        shutil.copy(root / "data" / "qrels" / "test.tsv", root / "data" / "qrels" / "train.tsv")

    def run(self, *args: str, script: str | None = None, env: dict | None = None, timeout: int = 900) -> Result:
        cmd = [sys.executable, script] if script else [sys.executable, "-m", "hf_dr.cli"]
        cmd += [str(a) for a in args]
        e = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=self.root, env=e, capture_output=True, text=True, timeout=timeout)
        return Result(p.returncode, p.stdout, p.stderr, time.perf_counter() - t)


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _weights_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*.safetensors")):
        from safetensors.numpy import load_file

        for k, v in sorted(load_file(str(p)).items()):
            h.update(k.encode())
            h.update(v.tobytes())
    return h.hexdigest()[:16]


def _write_qrels(work: Work, line: str) -> None:
    q = work.root / "data" / "qrels" / "test.tsv"
    rows = q.read_text().splitlines()
    rows[3] = line.format(qid=rows[3].split("\t")[0], did=rows[3].split("\t")[1])
    q.write_text("\n".join(rows) + "\n")


LABEL = ["label", "--data", "data", "--split", "train", "--dense-model", MINILM, "--max-length", "64",
         "--max-queries", "20", "--dev-queries", "5", "--negatives", "bm25"]


def _trained_model(work: Work, name: str = "model") -> Path:
    """A small DenseEncoder folder saved by hf-dr (push needs a folder of the suite)."""
    code = ("import sys; from hf_dr.models.dense import DenseEncoder; "
            "DenseEncoder.from_pretrained(sys.argv[1], max_length=64).save_pretrained(sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(MINILM), str(work.root / name)], check=True, cwd=work.root,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True)
    return work.root / name


# ---------------------------------------------------------------------------------------- the cases
# each returns (Result of the command the row shows, command shown, what was checked, check passed)

def case_push_parent(work: Work):
    m = _trained_model(work, "proj/model")
    before = _tree_digest(m)
    r = work.run("push", "proj/model", "--local-dir", "proj", "--overwrite")
    intact = m.is_dir() and _tree_digest(m) == before
    return r, "hf-dr push proj/model --local-dir proj --overwrite", f"proj/model intact: {intact}", intact


def case_push_cwd(work: Work):
    m = _trained_model(work)
    r = work.run("push", "model", "--local-dir", ".", "--overwrite")
    ok = m.is_dir() and (work.root / "data" / "corpus.jsonl").is_file()
    return r, "hf-dr push model --local-dir . --overwrite", f"working directory intact: {ok}", ok


def case_label_user_file(work: Work):
    out = work.root / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes\n")
    r = work.run(*LABEL, "--output", "mine")
    kept = (out / "README.md").read_text() == "my notes\n"
    return r, "hf-dr label ... --output mine   (mine/README.md is the user's)", f"user's README.md kept: {kept}", \
        kept and "not empty" in r.err


def case_label_overwrite_input(work: Work):
    shutil.copytree(work.root / "data", work.root / "proj" / "data")
    r = work.run(*[("proj/data" if a == "data" else a) for a in LABEL], "--output", "proj", "--overwrite")
    ok = (work.root / "proj" / "data" / "corpus.jsonl").is_file()
    return r, "hf-dr label --data proj/data ... --output proj --overwrite", f"input folder intact: {ok}", \
        ok and "refusing" in r.err


def case_label_crash(work: Work):
    """kill -9 after the train split is saved and before the dev split: no half folder."""
    code = ("import os, sys, hf_dr.labeling.pseudo_relevance as pr; orig = pr._save_dataset; n = [0]\n"
            "def boom(ds, path):\n    n[0] += 1\n    if n[0] == 2: os.kill(os.getpid(), 9)\n"
            "    return orig(ds, path)\n"
            "pr._save_dataset = boom\nfrom hf_dr.cli import main; sys.exit(main(sys.argv[1:]))\n")
    script = work.root / "crash.py"
    script.write_text(code)
    r = work.run(*LABEL, "--output", "labels", script=str(script))
    absent = not (work.root / "labels").exists()
    return r, "hf-dr label ... --output labels   (kill -9 after the train split was saved)", \
        f"killed (exit {r.rc}); labels/ absent: {absent}", absent and r.rc == -9


def case_label_stale_corpus(work: Work):
    cache = work.root / "cache"
    r1 = work.run(*LABEL, "--output", "l1", "--cache-dir", cache)
    corpus = work.root / "data" / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for row in rows:
        row["text"] = "changed " + row["text"][::-1]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    r2 = work.run(*LABEL, "--output", "l2", "--cache-dir", cache)
    t1 = (work.root / "l1").is_dir() and _triplet_texts(work.root / "l1")
    t2 = (work.root / "l2").is_dir() and _triplet_texts(work.root / "l2")
    ok = r1.rc == 0 and r2.rc == 0 and bool(t2) and all("changed" in t for t in t2[:20]) and t1 != t2
    return r2, "hf-dr label ... --cache-dir cache, again after every document's text changed (same ids)", \
        f"second run's triplets hold the new texts: {ok}", ok


def _triplet_texts(folder: Path) -> list[str]:
    from datasets import load_from_disk

    return [str(x) for x in load_from_disk(str(folder))["pos"][:50]]


def _files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def case_label_stale_model(work: Work):
    cache = work.root / "cache"
    model = work.root / "dense"
    shutil.copytree(MINILM, model)
    args = [("dense" if a == MINILM else a) for a in LABEL]
    r1 = work.run(*args, "--output", "l1", "--cache-dir", cache)
    n1 = _files(cache)
    # "retrained in place": other weights in the same folder
    code = ("import sys, torch; from safetensors.torch import load_file, save_file; p = sys.argv[1]; "
            "w = load_file(p); torch.manual_seed(0); "
            "w = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for k, v in w.items()}; "
            "save_file(w, p, metadata={'format': 'pt'})")
    subprocess.run([sys.executable, "-c", code, str(model / "model.safetensors")], check=True)
    r2 = work.run(*args, "--output", "l2", "--cache-dir", cache)
    n2 = _files(cache)
    ok = r1.rc == 0 and r2.rc == 0 and n2 > n1
    return r2, "hf-dr label --dense-model dense ... --cache-dir cache, again after dense/ was retrained in place", \
        f"dense stages recomputed (cache files {n1} -> {n2}): {ok}", ok


def case_push_labels(work: Work):
    r0 = work.run(*LABEL, "--output", "labels")
    r = work.run("push", "labels", "--dataset", "--local-dir", "repo")
    files = sorted(str(p.relative_to(work.root / "repo")) for p in (work.root / "repo").rglob("*") if p.is_file()) \
        if (work.root / "repo").is_dir() else []
    has_dev = any("dev" in f for f in files)
    card = (work.root / "repo" / "README.md").read_text() if (work.root / "repo" / "README.md").is_file() else ""
    has_card = "DoDress" in card or "pseudo" in card.lower()
    ok = r0.rc == 0 and r.rc == 0 and has_dev and has_card
    return r, "hf-dr push labels --dataset --local-dir repo", \
        f"dev split published: {has_dev}; pseudo-label card: {has_card}", ok


def case_sparse_on_dense(work: Work):
    r = work.run("evaluate", "--data", "data", "--retriever", "sparse", "--model", MINILM)
    return r, "hf-dr evaluate --data data --retriever sparse --model all-MiniLM-L6-v2", "refused before encoding", r.rc == 2


def case_grade_half(work: Work):
    _write_qrels(work, "{qid}\t{did}\t0.5")
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25")
    return r, "hf-dr evaluate --data data   (a qrels grade 0.5)", "refused, file:line named", \
        r.rc == 2 and "test.tsv:4" in r.err


def case_grade_inf(work: Work):
    _write_qrels(work, "{qid}\t{did}\tinf")
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25")
    return r, "hf-dr evaluate --data data   (a qrels score inf)", "refused, file:line named", \
        r.rc == 2 and "test.tsv:4" in r.err


def case_topk_zero(work: Work):
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25", "--top-k", "0")
    return r, "hf-dr evaluate --data data --top-k 0", "refused", r.rc == 2


def case_max_queries_zero(work: Work):
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25", "--max-queries", "0")
    return r, "hf-dr evaluate --data data --max-queries 0", "refused", r.rc == 2


def case_label_max_queries_zero(work: Work):
    r = work.run(*[a for a in LABEL if a not in ("--max-queries", "20")], "--max-queries", "0", "--output", "l")
    return r, "hf-dr label ... --max-queries 0", "refused", r.rc == 2


def case_data_typo(work: Work):
    r = work.run("evaluate", "--data", "nope/scifact", "--retriever", "bm25")
    return r, "hf-dr evaluate --data nope/scifact", "no Hub download attempted, no traceback", r.rc == 2


def case_model_no_weights(work: Work):
    m = work.root / "empty-model"
    m.mkdir()
    shutil.copy(MINILM / "config.json", m / "config.json")
    r = work.run("evaluate", "--data", "data", "--retriever", "dense", "--model", "empty-model")
    return r, "hf-dr evaluate --data data --retriever dense --model empty-model   (config.json, no weights)", \
        "refused", r.rc == 2


def case_stemmer(work: Work):
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25", "--bm25-stemmer", "klingon")
    return r, "hf-dr evaluate --data data --bm25-stemmer klingon", "refused", r.rc == 2


def case_unwritable_output(work: Work):
    """As root (this machine) a read-only folder is writable, so the folder cannot be created at all:
    its parent is a file."""
    r = work.run("evaluate", "--data", "data", "--retriever", "dense", "--model", MINILM,
                 "--output", "data/corpus.jsonl/out")
    return r, "hf-dr evaluate --data data --retriever dense ... --output data/corpus.jsonl/out", \
        f"refused after {r.seconds:.1f} s (before encoding)", r.rc == 2 and r.seconds < 30


def case_push_offline(work: Work):
    _trained_model(work)
    r = work.run("push", "model", "--repo-id", "someone/model")
    return r, "hf-dr push model --repo-id someone/model   (Hub unreachable)", "one-line message", r.rc == 2


def _ddr_args(out: str) -> list[str]:
    return ["--model_name_or_path", str(MINILM), "--train_data", "data", "--qrels_split", "test",
            "--min_positive_grade", "1", "--output_dir", out, "--max_steps", "3", "--seed", "0",
            "--per_device_train_batch_size", "4", "--lora_rank", "8", "--max_doc_length", "64",
            "--save_strategy", "no", "--use_cpu", "true"]


def case_ddr_seed(work: Work):
    script = str(REPO / "examples" / "train_ddr.py")
    r1 = work.run(*_ddr_args("rem1"), script=script)
    r2 = work.run(*_ddr_args("rem2"), script=script)
    same = r1.rc == 0 and r2.rc == 0 and _weights_digest(work.root / "rem1") == _weights_digest(work.root / "rem2")
    return r2, "python examples/train_ddr.py ... --max_steps 3 --seed 0   (twice)", f"identical weights: {same}", same


def case_resume_true(work: Work):
    script = str(REPO / "examples" / "train_ddr.py")
    r = work.run(*_ddr_args("rem"), "--resume_from_checkpoint", "True", script=script)
    return r, "python examples/train_ddr.py ... --resume_from_checkpoint True   (no checkpoint yet)", \
        "says there is none and how to start", r.rc == 2


def case_resume_half_checkpoint(work: Work):
    script = str(REPO / "examples" / "train_ddr.py")
    args = [a for a in _ddr_args("rem") if a not in ("--save_strategy", "no")]
    r1 = work.run(*args, "--save_strategy", "steps", "--save_steps", "1", script=script)
    ckpts = sorted((work.root / "rem").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    if ckpts:  # the last checkpoint half-written by a kill
        for f in ckpts[-1].iterdir():
            if f.name in ("trainer_state.json", "model.safetensors"):
                f.unlink()
    r = work.run(*args, "--save_strategy", "steps", "--save_steps", "1", "--resume_from_checkpoint", "last",
                 script=script)
    ok = r1.rc == 0 and r.rc == 0 and "seem corrupted" not in r.err and "Traceback" not in r.err
    return r, "python examples/train_ddr.py ... --resume_from_checkpoint last   (last checkpoint half-written)", \
        f"resumed from the last complete checkpoint, no corruption warning: {ok}", ok


def case_bm25_quiet(work: Work):
    r = work.run("evaluate", "--data", "data", "--retriever", "bm25")
    quiet = r.rc == 0 and "DEBUG" not in r.err and "Building index" not in r.err
    return r, "hf-dr evaluate --data data --retriever bm25", f"no DEBUG lines on stderr: {quiet}", quiet


def case_published_clean(work: Work):
    _trained_model(work)
    r = work.run("push", "model", "--local-dir", "repo")
    repo = work.root / "repo"
    leaks, modes = [], []
    for p in repo.rglob("*") if repo.is_dir() else []:
        if p.is_file():
            if (p.stat().st_mode & 0o777) != 0o644:
                modes.append(p.name)
            if p.suffix in (".json", ".md", ".txt", ".py") and (str(work.root) in p.read_text(errors="ignore")
                                                                or str(SHARED.resolve()) in p.read_text(errors="ignore")):
                leaks.append(p.name)
    ok = r.rc == 0 and repo.is_dir() and not leaks and not modes
    return r, "hf-dr push model --local-dir repo", \
        f"local paths in {leaks or 'no file'}; files not 0644: {modes or 'none'}", ok


CASES = [
    ("push --local-dir holding the model, --overwrite", "data loss", case_push_parent),
    ("push --local-dir . --overwrite", "data loss", case_push_cwd),
    ("label into a folder with the user's files", "data loss", case_label_user_file),
    ("label --overwrite over its own input", "data loss", case_label_overwrite_input),
    ("label killed between the train and dev saves", "data loss", case_label_crash),
    ("push a labels folder --dataset", "data loss", case_push_labels),
    ("label re-run after the corpus texts changed", "stale results", case_label_stale_corpus),
    ("label re-run after the dense model was retrained in place", "stale results", case_label_stale_model),
    ("sparse retriever on a model without MLM head", "wrong results", case_sparse_on_dense),
    ("qrels grade 0.5", "wrong results", case_grade_half),
    ("--top-k 0", "wrong results", case_topk_zero),
    ("evaluate --max-queries 0", "wrong results", case_max_queries_zero),
    ("label --max-queries 0", "wrong results", case_label_max_queries_zero),
    ("train_ddr.py twice with the same seed", "wrong results", case_ddr_seed),
    ("--data with a one-slash typo", "traceback", case_data_typo),
    ("--model folder without weights", "traceback", case_model_no_weights),
    ("qrels score inf", "traceback", case_grade_inf),
    ("unknown --bm25-stemmer", "traceback", case_stemmer),
    ("unwritable --output", "traceback", case_unwritable_output),
    ("--resume_from_checkpoint True with no checkpoint", "traceback", case_resume_true),
    ("resume after a checkpoint half-written by a kill", "traceback", case_resume_half_checkpoint),
    ("push --repo-id with the Hub unreachable", "traceback", case_push_offline),
    ("BM25 run output", "noise", case_bm25_quiet),
    ("published model folder", "noise", case_published_clean),
]


def _message(r: Result, work: Path) -> str:
    if r.rc < 0:
        return f"(killed by signal {-r.rc})"
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    err = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines and r.rc else "")
    err = err.replace(str(work.resolve()) + "/", "WORK/").replace(str(work) + "/", "WORK/")
    err = err.replace(str(SHARED.resolve()), "../shared").replace(str(REPO), ".")
    return err.strip()[:220]


def run_case(name: str, finding: str, fn) -> dict:
    root = Path(tempfile.mkdtemp(prefix="hfdr-probe-"))
    try:
        work = Work(root)
        r, shown, checked, ok = fn(work)
        tb = "Traceback (most recent call last)" in r.err
        verdict = "FAIL" if (tb or not ok) else ("clear error" if r.rc == 2 else "correct")
        return {"case": name, "finding": finding, "command": shown, "exit_status": r.rc,
                "message": _message(r, root), "traceback": tb, "checked": checked, "verdict": verdict}
    finally:
        for p in root.rglob("*"):
            if p.is_dir():
                os.chmod(p, 0o755)
        shutil.rmtree(root, ignore_errors=True)


def render(rows: list[dict]) -> str:
    lines = ["| finding | case | command | exit | message | checked | verdict |", "|---|---|---|---:|---|---|---|"]
    for r in rows:
        msg = r["message"].replace("|", "\\|") or "—"
        lines.append(f"| {r['finding']} | {r['case']} | `{r['command']}` | {r['exit_status']} | {msg} | "
                     f"{r['checked']} | **{r['verdict']}** |")
    return "\n".join(lines)


def render_doc(text: str, data: dict) -> str:
    body = render(data["rows"]) + f"\n\n`{data['command']}` — {data['machine']}, {data['date']}"
    return re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda m: f"{BEGIN}\n{body}\n{END}", text, flags=re.S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    a = ap.parse_args()
    if not MINILM.is_dir():
        print(f"{MINILM} is missing: the probes need ../shared/models", file=sys.stderr)
        return 2
    path = RESULTS / "probes.json"
    old = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    done = {r["case"]: r for r in old.get("rows", [])}
    for name, finding, fn in CASES:
        if a.only and a.only not in name:
            continue
        row = run_case(name, finding, fn)
        done[name] = row
        print(f"[{row['verdict']:>11}] {name}: exit {row['exit_status']} {row['message'][:100]}", flush=True)
    rows = [done[n] for n, _, _ in CASES if n in done]
    # every row is made by the same code whichever cases a run selected: the command that re-makes them all
    data = {"command": command_line().split(" --only")[0], "machine": machine(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    path.write_text(json.dumps(data, indent=1) + "\n")
    if DOC.is_file():
        DOC.write_text(render_doc(DOC.read_text(), data))
    fails = [r["case"] for r in rows if r["verdict"] == "FAIL"]
    print(f"{len(rows) - len(fails)}/{len(rows)} cases clear or correct" + (f"; FAIL: {fails}" if fails else ""))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
