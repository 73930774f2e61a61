"""Certified robustness: randomized smoothing (:mod:`~robustvit.certify.smoothing`; Cohen, Rosenfeld & Kolter,
ICML 2019, arXiv:1902.02918), derandomized smoothing against patches (:mod:`~robustvit.certify.ablation`; Levine &
Feizi, NeurIPS 2020, arXiv:2002.10733; Salman et al., CVPR 2022, arXiv:2110.07719) and SmoothAdv's attack
(:mod:`~robustvit.certify.smoothadv`; Salman et al., NeurIPS 2019, arXiv:1906.04584)."""

from robustvit.certify.ablation import (ABLATIONS, ENCODINGS, Ablation, AblatedModel, ablation_counts,
                                        patch_certificate)
from robustvit.certify.smoothing import (abstain_binomial, add_noise, certify, clopper_pearson_lower,
                                         noise_counts, predict)
from robustvit.certify.smoothadv import smoothadv_pgd, smoothed_log_probs

__all__ = ["ABLATIONS", "ENCODINGS", "Ablation", "AblatedModel", "ablation_counts", "abstain_binomial", "add_noise",
           "certify", "clopper_pearson_lower", "noise_counts", "patch_certificate", "predict", "smoothadv_pgd",
           "smoothed_log_probs"]
