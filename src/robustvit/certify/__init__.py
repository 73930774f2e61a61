"""Certified robustness: randomized smoothing (L2) and derandomized smoothing against patches.

* :mod:`robustvit.certify.smoothing`: Cohen, Rosenfeld & Kolter, "Certified Adversarial Robustness via Randomized
  Smoothing" (ICML 2019, arXiv:1902.02918; locuslab/smoothing) — CERTIFY and PREDICT, Clopper–Pearson bounds.
* :mod:`robustvit.certify.ablation`: Levine & Feizi, "(De)Randomized Smoothing for Certifiable Defense against
  Patch Attacks" (NeurIPS 2020, arXiv:2002.10733) — column and block ablations, the margin certificate; and
  Salman, Jain, Wong & Madry, "Certified Patch Robustness via Smoothed Vision Transformers" (CVPR 2022,
  arXiv:2110.07719; MadryLab/smoothed-vit) — ViTs drop the fully ablated tokens.
* :mod:`robustvit.certify.smoothadv`: Salman et al., "Provably Robust Deep Learning via Adversarially Trained
  Smoothed Classifiers" (NeurIPS 2019, arXiv:1906.04584) — SmoothAdv's PGD on the smoothed soft classifier.
"""

from robustvit.certify.ablation import (ABLATIONS, ENCODINGS, Ablation, AblatedModel, ablation_counts,
                                        patch_certificate)
from robustvit.certify.smoothing import (abstain_binomial, add_noise, certify, clopper_pearson_lower,
                                         noise_counts, predict)
from robustvit.certify.smoothadv import smoothadv_pgd, smoothed_log_probs

__all__ = ["ABLATIONS", "ENCODINGS", "Ablation", "AblatedModel", "ablation_counts", "abstain_binomial", "add_noise",
           "certify", "clopper_pearson_lower", "noise_counts", "patch_certificate", "predict", "smoothadv_pgd",
           "smoothed_log_probs"]
