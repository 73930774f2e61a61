"""Certified robustness: randomized smoothing (L2) and derandomized smoothing against patches.

* :mod:`robustvit.certify.smoothing`: Cohen, Rosenfeld & Kolter, "Certified Adversarial Robustness via Randomized
  Smoothing" (ICML 2019, arXiv:1902.02918; locuslab/smoothing) — CERTIFY and PREDICT, Clopper–Pearson bounds.
* :mod:`robustvit.certify.ablation`: Levine & Feizi, "(De)Randomized Smoothing for Certifiable Defense against
  Patch Attacks" (NeurIPS 2020, arXiv:2002.10733) — column and block ablations, the margin certificate; and
  Salman, Jain, Wong & Madry, "Certified Patch Robustness via Smoothed Vision Transformers" (CVPR 2022,
  arXiv:2110.07719; MadryLab/smoothed-vit) — ViTs drop the fully ablated tokens.
"""

from robustvit.certify.ablation import (ABLATIONS, Ablation, AblatedModel, ablation_counts, patch_certificate)
from robustvit.certify.smoothing import (abstain_binomial, add_noise, certify, clopper_pearson_lower,
                                         noise_counts, predict)

__all__ = ["ABLATIONS", "Ablation", "AblatedModel", "ablation_counts", "abstain_binomial", "add_noise", "certify",
           "clopper_pearson_lower", "noise_counts", "patch_certificate", "predict"]
