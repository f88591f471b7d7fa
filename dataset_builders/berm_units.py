"""Builder of BERM unit datasets (papers/000 §4.1): (query, positive[, negatives]) rows whose
positive is split into sentence units, with the essential matching unit annotated by
``h_i = BM25(q, u_i) + δ·r_i`` (BM25 over the unit collection; r_i an optional reader, Eq. 2).

    python dataset_builders/berm_units.py --data ../shared/data/msmarco-trecdl2019 --split test \
        --min-positive-grade 2 --n-negatives 1 --output out/msmarco-berm-units
    # with a reader (users who have the Hub):  --reader deepset/roberta-base-squad2

Writes ``data.parquet`` and a dataset card ``README.md``; ``datasets.load_dataset("parquet",
data_files=...)`` or ``examples/train_berm.py --train_data out/.../data.parquet`` read it back,
and ``Dataset.push_to_hub`` publishes it.

Columns: ``query``, ``qid``, ``pos``, ``neg`` (list[str]), ``units`` (list[str]),
``unit_char_spans`` (list of ``[start, end)`` character spans of ``pos``), ``unit_scores``
(list[float], h_i), ``essential_unit`` (int; -100 = none: no unit, or no term overlap and no reader).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def build_berm_units(data: str, *, split: str = "test", min_positive_grade: int = 1, negative_grade: int = 0,
                     n_negatives: int = 0, reader: str | None = None, delta: float = 0.1, max_rows: int | None = None,
                     seed: int = 0, output: str | None = None, show_progress_bar: bool = True):
    """Build (and with ``output`` save) the unit dataset of a BEIR folder / Hub dataset."""
    from hf_dr.data import load_beir, triplets_from_qrels
    from hf_dr.hub.cards import write_card
    from hf_dr.labeling.units import NO_LABEL, annotate_units

    beir = load_beir(data, split=split)
    rows = triplets_from_qrels(beir, min_positive_grade, negative_grade, n_negatives, seed=seed)
    if max_rows:
        rows = rows.select(range(min(max_rows, len(rows))))
    ds = annotate_units(rows, reader=reader, delta=delta, show_progress_bar=show_progress_bar)
    if output:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(out / "data.parquet"))
        n_units = [len(u) for u in ds["units"]]
        write_card(
            out, "dataset_berm_units", {"tags": ["hf-dr", "berm", "retrieval"], "task_categories": ["text-retrieval"],
                                        "language": ["en"]}, repo_type="dataset",
            name=Path(str(data)).name, source=data, split=split, min_grade=min_positive_grade,
            neg_text=f", {n_negatives} hard negative(s) of grade {negative_grade}" if n_negatives else "",
            delta=delta, reader=f"`{reader}` (max start probability over the unit, Eq. 2)" if reader else "none (BM25 only)",
            n_rows=len(ds), mean_units=sum(n_units) / max(1, len(n_units)),
            n_none=sum(1 for x in ds["essential_unit"] if x == NO_LABEL))
    return ds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="BEIR folder or Hub dataset id")
    ap.add_argument("--split", default="test")
    ap.add_argument("--min-positive-grade", type=int, default=1)
    ap.add_argument("--negative-grade", type=int, default=0)
    ap.add_argument("--n-negatives", type=int, default=0)
    ap.add_argument("--reader", default=None, help="AutoModelForQuestionAnswering id / folder (Eq. 2); default none")
    ap.add_argument("--delta", type=float, default=0.1)
    ap.add_argument("--max-rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", required=True)
    a = ap.parse_args(argv)
    ds = build_berm_units(a.data, split=a.split, min_positive_grade=a.min_positive_grade, negative_grade=a.negative_grade,
                          n_negatives=a.n_negatives, reader=a.reader, delta=a.delta, max_rows=a.max_rows, seed=a.seed,
                          output=a.output)
    print(f"{len(ds)} rows -> {a.output}")


if __name__ == "__main__":
    main()
