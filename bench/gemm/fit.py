"""Fit t = F / R + tau to the whole-layer rows of gemm_shapes.csv (docs/cost-model.md, section 14).

    python bench/gemm/fit.py      ->  R (TFLOP/s), tau (us per layer forward + backward), mean |error|
"""

import csv
from pathlib import Path

import numpy as np

rows = [r for r in csv.DictReader((Path(__file__).parent / "gemm_shapes.csv").open()) if r["kind"] == "layer"]
seconds = np.array([float(r["s"]) for r in rows])
flops = np.array([float(r["tflops"]) * 1e12 * float(r["s"]) for r in rows])
# least squares on relative error: minimize sum (F / (R t) + tau / t - 1)^2 over 1/R and tau
coef, *_ = np.linalg.lstsq(np.stack([flops / seconds, 1 / seconds], 1), np.ones_like(seconds), rcond=None)
rate, tau = 1 / coef[0], coef[1]
error = (flops / rate + tau) / seconds - 1
print(f"R = {rate / 1e12:.0f} TFLOP/s, tau = {tau * 1e6:.1f} us (forward + backward), "
      f"GEMM_FIXED_S = tau / 3 = {tau / 3 * 1e6:.1f} us; mean |error| {np.mean(abs(error)):.1%} over {len(rows)} shapes")
