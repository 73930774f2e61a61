"""robustvit.corruptions — common corruptions (ImageNet-C / CIFAR-10-C), batched in PyTorch.

The 15 benchmark corruptions and 4 extra ones of Hendrycks & Dietterich, "Benchmarking Neural Network
Robustness to Common Corruptions and Perturbations", ICLR 2019 (arXiv:1903.12261), at severities 1–5, on
batches (N, 3, H, W) in [0, 1] on any device. See ``docs/corruptions.md``.

>>> import torch
>>> from robustvit.corruptions import corrupt, list_corruptions, list_perturbations
>>> x = torch.rand(8, 3, 224, 224)
>>> y = corrupt(x, "motion_blur", 3, seed=0)          # preset "imagenet" from the size
>>> list_perturbations("geometric")                   # ImageNet-P sequences, registered next to them
['translate', 'rotate', 'tilt', 'scale', 'shear']

The building blocks (the last group of ``__all__``) have stable names; the ImageNet-P sequences reuse them.
"""

from robustvit.corruptions.color import hsv_to_rgb, rgb_to_gray, rgb_to_hsv
from robustvit.corruptions.compat import corrupt_image, get_corruption_names
from robustvit.corruptions.engine import corrupt, is_random, list_corruptions
from robustvit.corruptions.filters import defocus, disk_kernel, filter2d, gaussian_blur, gaussian_filter, pad
from robustvit.corruptions.fractal import plasma_fractal
from robustvit.corruptions.frost import frost_texture
from robustvit.corruptions.functional import snow_flakes, snow_layer
from robustvit.corruptions.geometry import clipped_zoom, motion_blur, motion_kernel, warp_bilinear, zoom_factors
from robustvit.corruptions.glass import glass_shuffle
from robustvit.corruptions.jpeg import jpeg_roundtrip, to_uint8
from robustvit.corruptions.params import (BENCHMARK_CORRUPTIONS, CORRUPTION_GROUPS, EXTRA_CORRUPTIONS, PRESET_SIZES,
                                          corruption_params, resolve_preset)
from robustvit.corruptions.perturbations import (PERTURBATIONS, Perturbation, PerturbationOptions, get_perturbation,
                                                 iter_perturbation_frames, list_perturbations, perturbation_sequence,
                                                 register_perturbation)
from robustvit.corruptions.spec import CORRUPTIONS, Corruption, CorruptionParams, Draw, corruption, register_corruption

__all__ = [
    # engine
    "corrupt", "list_corruptions", "is_random", "corruption_params", "CorruptionParams", "resolve_preset",
    "BENCHMARK_CORRUPTIONS", "EXTRA_CORRUPTIONS", "CORRUPTION_GROUPS", "PRESET_SIZES",
    # one corruption = one spec
    "CORRUPTIONS", "Corruption", "Draw", "corruption", "register_corruption",
    # ImageNet-P perturbation sequences: one perturbation = one spec
    "PERTURBATIONS", "Perturbation", "PerturbationOptions", "get_perturbation", "list_perturbations",
    "perturbation_sequence", "iter_perturbation_frames", "register_perturbation",
    # imagecorruptions drop-in
    "corrupt_image", "get_corruption_names",
    # building blocks
    "gaussian_blur", "gaussian_filter", "motion_blur", "motion_kernel", "clipped_zoom", "plasma_fractal",
    "snow_layer", "snow_flakes", "frost_texture", "disk_kernel", "defocus", "filter2d", "pad", "glass_shuffle",
    "jpeg_roundtrip", "to_uint8", "rgb_to_hsv", "hsv_to_rgb", "rgb_to_gray", "warp_bilinear", "zoom_factors",
]
