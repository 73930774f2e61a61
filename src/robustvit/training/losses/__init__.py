"""Pluggable training losses, one module per loss on one base class (as :mod:`robustvit.attacks`):

* ``ce``: cross-entropy with label smoothing (soft targets from MixUp/CutMix accepted).
* ``pgd_at``: Madry et al. (arXiv:1706.06083): train on PGD examples only.
* ``fgsm_rs``: Wong et al., "Fast is better than free" (arXiv:2001.03994).
* ``trades``: Zhang et al. (arXiv:1901.08573), as yaodongyu/TRADES.
* ``afat`` (and ``afat_random``, ``afat_patchdrop``): Guo et al., CVPR 2023, as guoyongcs/RSPC.
* ``gaussian_noise``: Cohen et al. (arXiv:1902.02918): Gaussian augmentation for randomized smoothing.
* ``ablation``: Levine & Feizi (arXiv:2002.10733), Salman et al. (arXiv:2110.07719): column/block ablations.
* ``mpp``: masked patch prediction, the ViT paper's self-supervised pre-training (:mod:`robustvit.training.losses.mpp`).

The registry imports every module of this package before its first lookup (a new loss module needs no list to
edit); hyphenated spellings (``pgd-at``) are aliases. ε follows a per-epoch schedule
(:mod:`robustvit.training.schedules`); at ε = 0 the adversarial losses train on clean images. Random draws are
seeded from ``seed`` and a call counter in the loss's ``state_dict``, so a resumed run replays them.

>>> model, x, y = create_model("vit_cifar_micro", num_classes=10), torch.rand(4, 3, 32, 32), torch.arange(4)
>>> loss_fn = create_loss("fgsm_rs", eps="4/255")
>>> loss, clean_logits, adv_logits = loss_fn(model, x, y, epoch=0)
>>> loss.ndim, clean_logits.shape, adv_logits.shape
(0, torch.Size([4, 10]), torch.Size([4, 10]))
"""

from robustvit.training.losses.base import (LOSSES, LossOutput, TrainingLoss, _rank, classification_loss,
                                            create_loss, hard_labels, list_losses, loss_keywords,
                                            parse_loss_options, register_loss)
from robustvit.training.losses.ce import CrossEntropy
from robustvit.training.losses.adversarial import AdversarialLoss, AdversarialOptions
from robustvit.training.losses.pgd_at import PGDAT
from robustvit.training.losses.fgsm_rs import FGSMRS
from robustvit.training.losses.trades import TRADES
from robustvit.training.losses.afat import AFAT, AFATOptions, AFATPatchDrop, AFATRandom
from robustvit.training.losses.ablation import AblationLoss
from robustvit.training.losses.gaussian_noise import GaussianNoise
from robustvit.training.losses.mpp import MaskedPatchPrediction

__all__ = ["AFAT", "AFATOptions", "AFATPatchDrop", "AFATRandom", "AblationLoss", "AdversarialLoss", "AdversarialOptions",
           "CrossEntropy", "FGSMRS", "GaussianNoise", "LOSSES", "LossOutput", "MaskedPatchPrediction", "PGDAT", "TRADES",
           "TrainingLoss", "_rank", "classification_loss", "create_loss", "hard_labels", "list_losses", "loss_keywords",
           "parse_loss_options", "register_loss"]
