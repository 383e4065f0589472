"""How far a validation set's rank correlation can be trusted: a bootstrap interval for its Spearman.

    optsearch validate bench/validation/amp-p3-g4dn.csv --json > het.json
    python bench/validation/spearman_bootstrap.py het.json
    python bench/validation/spearman_bootstrap.py het.json --compare bench/validation/amp-p3-g4dn.csv:amp_predicted_s

Resamples the timed runs (measured time, not out of memory) of `validate --json` with replacement and prints the
Spearman of predicted against measured time, its 95% percentile interval and the share of resamples at or above a
goal (default 0.6, issue 15's heterogeneous goal), with the Fisher-z interval beside it (Bonett and Wright's
standard error for Spearman, sqrt((1 + r^2 / 2) / (n - 3))). `--compare CSV:COLUMN` does the same for another
predictor given per run in a CSV column (e.g. AMP's own `amp_predicted_s`) and for the paired difference, on the
same resamples. Ties take average ranks, as `optsearch validate` does. A diagnostic: nothing here changes a model.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys

import numpy as np


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties averaged."""
    order = np.argsort(x, kind="mergesort")
    out = np.empty(len(x))
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        out[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def fisher_interval(r: float, n: int) -> tuple[float, float]:
    if n <= 3 or abs(r) >= 1:
        return (r, r)
    z, se = math.atanh(r), math.sqrt((1 + r * r / 2) / (n - 3))
    return (math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se))


def bootstrap(measured: np.ndarray, predictors: dict[str, np.ndarray], resamples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n = len(measured)
    out = {name: [] for name in predictors}
    for _ in range(resamples):
        k = rng.integers(0, n, n)
        for name, p in predictors.items():
            out[name].append(spearman(p[k], measured[k]))
    return {name: np.array(v) for name, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("validate_json", help="output of `optsearch validate RUNS.csv --json`")
    ap.add_argument("--compare", metavar="CSV:COLUMN", help="another predictor, per run_id, from a CSV column")
    ap.add_argument("--goal", type=float, default=0.6)
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    with open(args.validate_json) as f:
        runs = json.load(f)["runs"]
    timed = sorted((r for r in runs if r.get("measured_iteration_s") is not None and not r.get("oom")),
                   key=lambda r: r["run_id"])
    if len(timed) < 4:
        print(f"{args.validate_json}: {len(timed)} timed runs; at least 4 are needed", file=sys.stderr)
        return 2
    ids = [r["run_id"] for r in timed]
    measured = np.array([r["measured_iteration_s"] for r in timed], dtype=float)
    predictors = {"optsearch": np.array([r["predicted_iteration_s"] for r in timed], dtype=float)}
    if args.compare:
        path, _, column = args.compare.rpartition(":")
        with open(path) as f:
            rows = {r["run_id"]: r for r in csv.DictReader(line for line in f if not line.startswith("#"))}
        missing = [i for i in ids if i not in rows or not rows[i].get(column)]
        if missing:
            print(f"{path}: column {column!r} has no value for run {missing[0]}", file=sys.stderr)
            return 2
        predictors[column] = np.array([float(rows[i][column]) for i in ids])

    boot = bootstrap(measured, predictors, args.resamples, args.seed)
    print(f"{len(ids)} timed runs, {args.resamples} resamples (seed {args.seed})")
    for name, p in predictors.items():
        r = spearman(p, measured)
        b = boot[name][~np.isnan(boot[name])]
        lo, hi = np.percentile(b, [2.5, 97.5])
        flo, fhi = fisher_interval(r, len(ids))
        print(f"{name}: Spearman {r:.3f}; bootstrap 95% [{lo:.3f}, {hi:.3f}]; Fisher-z 95% [{flo:.3f}, {fhi:.3f}]; "
              f"share of resamples >= {args.goal}: {np.mean(b >= args.goal):.3f}")
    if args.compare:
        other = list(predictors)[1]
        d = boot["optsearch"] - boot[other]
        d = d[~np.isnan(d)]
        lo, hi = np.percentile(d, [2.5, 97.5])
        print(f"optsearch - {other}: bootstrap 95% [{lo:.3f}, {hi:.3f}]; share > 0: {np.mean(d > 0):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
