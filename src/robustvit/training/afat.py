"""AFAT lives in :mod:`robustvit.training.losses.afat`; this module keeps the older import path."""

from robustvit.training.losses.afat import (AFAT, AFATOptions, AFATPatchDrop, AFATRandom, PatchCorruptor,  # noqa: F401
                                            _TopKOcclusion, corrupt, num_occluded, occlusion_to_pixels,
                                            random_occlusion)
