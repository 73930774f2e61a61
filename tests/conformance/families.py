"""One tiny configuration per timm architecture family, with non-trivial random weights.

Each :class:`Family` names a timm (or robustvit) model and the constructor keywords that make it small
(depth, width, image size) so that it builds and runs in well under a second on a CPU. :func:`build` returns
it through robustvit's ``create_model`` (the ``Normalized`` wrapper) in eval mode, with weights made
non-trivial by :func:`perturb` — every normalisation layer's weight ~N(1, 0.5) and bias ~N(0, 0.1), BatchNorm
running statistics, LayerScale gammas ~N(1, 0.5), and every other constant-initialised parameter (zero biases,
zero-initialised heads and relative-position tables, position embeddings, prefix tokens) moved off its
constant — so that a wrong recomputation of the model (a missing norm, LayerScale, bias, position term or
prefix token) changes the outputs visibly. Everything is seeded.

Used by ``tests/conformance`` (the zoo conformance tests), ``robustvit.capabilities``' documentation
generator (``benchmarks/model_capabilities.py``) and the probe tests::

    from families import FAMILIES, build, get_family
    model = build(get_family("beit"))          # a Normalized, eval mode, seeded
    x = example_input(model)                    # (2, 3, S, S) in [0, 1]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

#: Default number of classes of the tiny models (small, > 1, not a common class count).
NUM_CLASSES = 7

_VIT = dict(embed_dim=32, depth=2, num_heads=2, num_classes=NUM_CLASSES)


@dataclass(frozen=True)
class Family:
    """A timm architecture family and one tiny configuration of it.

    ``key``: a short unique identifier (test ids, docs rows); ``model``: the model name given to
    ``create_model``; ``kwargs``: constructor keywords (``img_size`` is passed when the architecture takes
    it); ``img_size``: the input side the tests use; ``kind``: "vit" (timm ``VisionTransformer`` and its
    variants that the ViT probe targets), "transformer" (other attention models), "hybrid", "cnn" or "mlp";
    ``adapt``: the fine-tuning adaptations of ``robustvit.models.finetune`` that should apply — "head",
    "img_size", "patch_size" — with the new values in ``adapt_to``; ``note``: what makes the family special.
    """

    key: str
    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    img_size: int = 32
    kind: str = "cnn"
    pass_img_size: bool = True
    adapt: tuple[str, ...] = ("head",)
    adapt_to: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def build_kwargs(self) -> dict[str, Any]:
        kw = dict(self.kwargs)
        kw.setdefault("num_classes", NUM_CLASSES)
        if self.pass_img_size:
            kw.setdefault("img_size", self.img_size)
        return kw


def _vit(key: str, model: str, note: str, img_size: int = 32, patch: int = 8, adapt: tuple[str, ...] = ("head", "img_size", "patch_size"),
         **kw: Any) -> Family:
    kwargs = {**_VIT, "patch_size": patch, **kw}
    return Family(key, model, kwargs, img_size, "vit", True, adapt, {"img_size": img_size + 2 * patch, "patch_size": patch // 2},
                  note)


#: The families, in documentation order: timm ViT variants, other attention models, hybrids, CNNs, MLPs.
FAMILIES: list[Family] = [
    # ---- timm VisionTransformer and its variants --------------------------------------------------------
    _vit("vit", "vit_small_patch16_224", "plain ViT: CLS token, pre-norm blocks, learned absolute positions"),
    _vit("vit_cifar", "vit_cifar_tiny", "robustvit's CIFAR ViT (4x4 patches)", img_size=16, patch=4),
    _vit("vit_gap", "vit_cifar_micro", "robustvit's demo ViT: no CLS token, global average pooling", img_size=16, patch=4),
    Family("vit_convstem", "vit_cifar_demo", dict(embed_dim=32, depth=2, num_heads=2), 32, "vit", True, ("head",), {},
           "robustvit's demo ViT on a convolutional stem (ConvStemPatchEmbed)"),
    _vit("deit", "deit_tiny_patch16_224", "DeiT: ViT with the DeiT recipe"),
    _vit("deit3", "deit3_small_patch16_224", "DeiT-III: LayerScale, no position embedding on the CLS token"),
    _vit("deit_distilled", "deit_tiny_distilled_patch16_224", "distilled DeiT: CLS + distillation token, two heads"),
    _vit("vit_reg_gap", "vit_base_patch16_reg4_gap_256", "4 registers, no CLS token, average pooling"),
    _vit("vit_reg_cls", "vit_small_patch14_reg4_dinov2", "CLS + 4 registers, LayerScale (DINOv2)", patch=8),
    _vit("vit_qknorm", "vit_small_patch16_224", "query/key LayerNorm inside attention", qk_norm=True),
    _vit("vit_postnorm", "vit_base_patch16_rpn_224", "residual post-norm blocks (ResPostBlock)"),
    _vit("vit_relpos", "vit_relpos_small_patch16_224", "relative position bias (VisionTransformerRelPos)", adapt=("head",)),
    _vit("vit_map", "vit_base_patch16_siglip_224", "attention-pooling (MAP) head, no CLS token (SigLIP)"),
    _vit("vit_parallel", "vit_small_patch16_18x2_224", "two parallel attention/MLP branches per block (ParallelThingsBlock)"),
    _vit("vit_xp", "vit_base_patch16_xp_224", "parallel scaling blocks (fused attention+MLP projections)"),
    _vit("vit_clip", "vit_base_patch16_clip_224", "pre-norm before the blocks (norm_pre), CLIP image tower"),
    _vit("vit_fcnorm", "vit_medium_patch16_gap_256", "no CLS, average pooling, fc_norm before the head"),
    _vit("beit", "beit_base_patch16_224", "BEiT: relative position bias, q/v biases, LayerScale", adapt=("head",)),
    _vit("eva", "eva02_tiny_patch14_224", "EVA-02: rotary position embedding, SwiGLU MLP", patch=8, adapt=("head",)),
    Family("cait", "cait_xxs24_224", dict(embed_dim=32, depth=2, num_heads=2, patch_size=8), 32, "transformer", True,
           ("head", "img_size"), {"img_size": 48}, "CaiT: talking-heads attention, class-attention blocks"),
    Family("xcit", "xcit_nano_12_p16_224", dict(embed_dim=32, depth=2, num_heads=2, patch_size=16), 32, "transformer",
           True, ("head", "patch_size"), {"patch_size": 4}, "XCiT: cross-covariance attention, convolutional stem"),
    Family("fan", "fan_tiny_12_p16_224", dict(embed_dim=32, depth=2, num_heads=2, patch_size=16), 32, "transformer",
           True, ("head",), {}, "robustvit's FAN: efficient channel attention, ConvStem"),
    Family("fan_cifar", "fan_cifar_micro", {}, 32, "transformer", True, ("head",), {}, "robustvit's CIFAR FAN"),
    Family("convit", "convit_tiny", dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, local_up_to_layer=1),
           32, "transformer", True, ("head",), {}, "ConViT: gated positional self-attention"),
    Family("crossvit", "crossvit_tiny_240", dict(embed_dim=[16, 32], depth=[[1, 1, 0]], num_heads=[2, 2],
                                                 mlp_ratio=[2, 2, 1], img_scale=(1.0, 1.0), patch_size=[8, 16]),
           32, "transformer", True, ("head",), {}, "CrossViT: two branches with cross-attention"),
    Family("swin", "swin_tiny_patch4_window7_224", dict(embed_dim=16, depths=(1, 1), num_heads=(1, 2), window_size=4),
           32, "transformer", True, ("head",), {}, "Swin: shifted-window attention, patch merging"),
    Family("swinv2", "swinv2_tiny_window8_256", dict(embed_dim=16, depths=(1, 1), num_heads=(1, 2), window_size=4),
           32, "transformer", True, ("head",), {}, "Swin-V2: scaled cosine attention, log-spaced CPB, post-norm"),
    Family("pit", "pit_ti_224", dict(patch_size=8, stride=4, base_dims=[16, 16], depth=[1, 1], heads=[1, 2]), 32,
           "transformer", True, ("head",), {}, "PiT: pooling-based ViT"),
    Family("twins", "twins_svt_small", dict(embed_dims=(16, 32), num_heads=(1, 2), mlp_ratios=(2, 2), depths=(1, 1),
                                            sr_ratios=(2, 1), wss=(2, 2), patch_size=4), 32, "transformer", True,
           ("head",), {}, "Twins-SVT: locally-grouped + global sub-sampled attention"),
    Family("coat", "coat_lite_tiny", dict(embed_dims=[16, 32, 32, 32], serial_depths=[1, 1, 1, 1], num_heads=8,
                                          mlp_ratios=[2, 2, 2, 2]), 32, "transformer", True, ("head",), {},
           "CoaT-Lite: conv-attentional (factorised attention, conv position encoding)"),
    Family("nest", "nest_tiny", dict(patch_size=2), 32,
           "transformer", True, ("head",), {}, "NesT: nested local transformers with block aggregation"),
    Family("tnt", "tnt_s_patch16_224", dict(embed_dim=32, inner_dim=8, depth=2, num_heads_outer=2, num_heads_inner=1,
                                            patch_size=8), 32, "transformer", True, ("head",), {},
           "TNT: transformer in transformer (pixel + patch tokens)"),
    Family("levit", "levit_128s", dict(embed_dim=(32, 48, 64), key_dim=8, num_heads=(2, 2, 2), depth=(1, 1, 1)), 64,
           "transformer", True, ("head",), {}, "LeViT: conv stem, attention with biases, distillation head"),
    Family("efficientformer", "efficientformer_l1", dict(depths=(1, 1, 1, 1), embed_dims=(16, 24, 32, 48),
                                                         num_vit=1), 224, "transformer", True, ("head",), {},
           "EfficientFormer: pooling MetaBlocks then a ViT stage (attention bias fixed to 224 px input)"),
    Family("gcvit", "gcvit_xxtiny", dict(embed_dim=16),
           64, "transformer", True, ("head",), {}, "GCViT: global-context attention"),
    Family("maxvit", "maxvit_rmlp_pico_rw_256", {}, 64, "hybrid", True,
           ("head",), {}, "MaxViT: MBConv + block and grid attention"),
    Family("vit_hybrid", "vit_tiny_r_s16_p8_224", dict(embed_dim=32, depth=2, num_heads=2), 64, "hybrid", True,
           ("head",), {}, "hybrid ViT: ResNet stem then ViT blocks on its feature map"),
    Family("visformer", "visformer_tiny", dict(init_channels=8, embed_dim=32, depth=(1, 1, 1), num_heads=2), 64,
           "hybrid", True, ("head",), {}, "Visformer: conv stages then attention stages"),
    Family("poolformer", "poolformer_s12", {}, 32, "hybrid", False,
           ("head", "img_size"), {"img_size": 48}, "PoolFormer / MetaFormer: pooling token mixer, GroupNorm"),
    # ---- CNNs ----------------------------------------------------------------------------------------------
    Family("resnet", "resnet18", dict(layers=(1, 1, 1, 1)), 32, "cnn", False, ("head", "img_size"), {"img_size": 48},
           "ResNet (BasicBlock), BatchNorm"),
    Family("resnet_cifar", "resnet_cifar18", dict(width_mult=0.25), 32, "cnn", False, ("head", "img_size"),
           {"img_size": 48}, "robustvit's CIFAR ResNet-18"),
    Family("resnext", "resnext50_32x4d", dict(layers=(1, 1, 1, 1), base_width=2), 32, "cnn", False,
           ("head", "img_size"), {"img_size": 48}, "ResNeXt: grouped bottlenecks"),
    Family("convnext", "convnext_atto", dict(depths=(1, 1, 1, 1), dims=(16, 16, 32, 32)), 32, "cnn", False,
           ("head", "img_size"), {"img_size": 48}, "ConvNeXt: depthwise conv, LayerNorm, LayerScale"),
    Family("efficientnet", "efficientnet_b0", {}, 32, "cnn", False,
           ("head", "img_size"), {"img_size": 48}, "EfficientNet: MBConv, squeeze-excitation"),
    Family("mobilenetv3", "mobilenetv3_small_050", {}, 32, "cnn", False, ("head", "img_size"), {"img_size": 48},
           "MobileNetV3: hard-swish, SE, conv head"),
    Family("regnet", "regnetx_002", {}, 32, "cnn", False, ("head", "img_size"), {"img_size": 48}, "RegNetX"),
    Family("densenet", "densenet121", dict(growth_rate=8, block_config=(1, 1, 1, 1)), 32, "cnn",
           False, ("head", "img_size"), {"img_size": 48}, "DenseNet: concatenating dense blocks"),
    Family("vgg", "vgg11", dict(mlp_ratio=0.01), 32, "cnn", False, ("head", "img_size"), {"img_size": 48},
           "VGG: plain conv stack, conv-MLP pre-logits"),
    Family("inception", "inception_v3", {}, 80, "cnn", False, ("head",), {}, "Inception-v3: multi-branch modules"),
    Family("repvgg", "repvgg_a0", {}, 32, "cnn", False, ("head", "img_size"), {"img_size": 48},
           "RepVGG (ByobNet): re-parameterisable 3x3 + 1x1 + identity branches"),
    # ---- MLPs ------------------------------------------------------------------------------------------------
    Family("mixer", "mixer_s16_224", {}, 32, "mlp", True, ("head",), {},
           "MLP-Mixer: token- and channel-mixing MLPs"),
    Family("resmlp", "resmlp_12_224", {}, 32, "mlp", True, ("head",), {},
           "ResMLP: affine normalisation, LayerScale"),
    Family("gmlp", "gmlp_ti16_224", {}, 32, "mlp", True, ("head",), {},
           "gMLP: spatial gating unit"),
    Family("sequencer", "sequencer2d_s", dict(layers=(1, 1, 1, 1), patch_sizes=(4, 2, 1, 1), embed_dims=(16, 16, 32, 32),
                                              hidden_sizes=(8, 8, 16, 16)), 32, "mlp", True, ("head",), {},
           "Sequencer2D: bidirectional LSTM token mixing"),
]

_BY_KEY = {f.key: f for f in FAMILIES}
assert len(_BY_KEY) == len(FAMILIES), "family keys must be unique"


def family_keys() -> list[str]:
    return [f.key for f in FAMILIES]


def get_family(key: str) -> Family:
    return _BY_KEY[key]


# ---------------------------------------------------------------------------------------------------------
# non-trivial random weights
# ---------------------------------------------------------------------------------------------------------
_LAYERSCALE = re.compile(r"(^|\.)(gamma\w*|ls\d*\.gamma|ls\d*\.scale|layer_scale\w*|ls\d+|alpha)$")
_EMBEDDING = re.compile(r"(pos_embed\w*|cls_token|dist_token|reg_token|latent|relative_position_bias_table|rel_pos\w*|"
                        r"q_bias|v_bias|k_bias|attn_bias\w*|bias_table)")


def perturb(net: nn.Module, seed: int = 0) -> nn.Module:
    """Make ``net``'s random weights non-trivial in place (see the module docstring); returns ``net``."""
    g = torch.Generator().manual_seed(seed)

    def normal(t: torch.Tensor, mean: float, std: float) -> None:
        t.copy_((torch.randn(t.shape, generator=g) * std + mean).to(t.dtype))

    done: set[int] = set()
    with torch.no_grad():
        for mod in net.modules():
            is_norm = "norm" in type(mod).__name__.lower() or isinstance(mod, (nn.LayerNorm, nn.GroupNorm))
            if not is_norm:
                continue
            w, b = getattr(mod, "weight", None), getattr(mod, "bias", None)
            if isinstance(w, torch.Tensor) and w.is_floating_point():
                normal(w, 1.0, 0.5)
                done.add(id(w))
            if isinstance(b, torch.Tensor) and b.is_floating_point():
                normal(b, 0.0, 0.1)
                done.add(id(b))
            rm, rv = getattr(mod, "running_mean", None), getattr(mod, "running_var", None)
            if isinstance(rm, torch.Tensor) and isinstance(rv, torch.Tensor):
                normal(rm, 0.0, 0.1)
                rv.copy_(torch.rand(rv.shape, generator=g) + 0.5)
        for name, p in net.named_parameters():
            if id(p) in done or not p.is_floating_point() or p.numel() == 0:
                continue
            if _LAYERSCALE.search(name):
                normal(p, 1.0, 0.5)
            elif _EMBEDDING.search(name):
                normal(p, 0.0, 0.5 if "embed" in name or "token" in name else 0.1)
            elif p.numel() > 1 and bool((p == p.flatten()[0]).all()):    # any other constant initialisation
                c = float(p.flatten()[0])
                normal(p, c if c != 0 else 0.0, 0.1 if c == 0 else 0.1 * max(1.0, abs(c)))
    return net


def calibrate_batchnorm(net: nn.Module, img_size: int, seed: int = 0) -> None:
    """Set BatchNorm running statistics from one training-mode pass over 8 seeded standard-normal images (as
    normalised inputs look; cumulative average), so that activations keep a sane scale through deep perturbed
    CNNs; a no-op without BatchNorm."""
    bns = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    x = torch.randn(8, 3, img_size, img_size, generator=torch.Generator().manual_seed(seed + 1))
    saved = [(m, m.momentum) for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    net.train()
    with torch.no_grad():
        net(x)
    for m, mom in saved:
        m.momentum = mom
    net.eval()


def _tame_head(model: Any, seed: int) -> None:
    """Scale the classifier so that logits have a standard deviation of about 1 on random images (deep perturbed
    CNNs otherwise give logits of 1e3+, which saturate softmax-based attacks); internal activations keep
    their scale."""
    net = model.net
    head = net.get_classifier() if hasattr(net, "get_classifier") else None
    heads = [head] if isinstance(head, nn.Linear) else \
        [m for m in head if isinstance(m, nn.Linear)] if isinstance(head, (tuple, list)) else []
    if not heads:
        return
    s = int(model.spec.image_size)
    x = torch.rand(4, 3, s, s, generator=torch.Generator().manual_seed(seed + 2))
    with torch.no_grad():
        std = float(model.eval()(x).std())
        if std > 4:
            for h in heads:
                h.weight.div_(std)
                if h.bias is not None:
                    h.bias.div_(std)


def build(family: Family | str, seed: int = 0, **overrides: Any):  # -> robustvit.models.Normalized
    """The family's tiny model through robustvit's ``create_model``, perturbed (seeded), in eval mode."""
    from robustvit.models import create_model

    fam = get_family(family) if isinstance(family, str) else family
    torch.manual_seed(seed)
    model = create_model(fam.model, **{**fam.build_kwargs, **overrides})
    if not fam.pass_img_size:   # convolutional nets take any size; the tests feed img_size
        model.spec.input_size = (3, fam.img_size, fam.img_size)
    perturb(model.net, seed)
    calibrate_batchnorm(model.net, fam.img_size, seed)
    _tame_head(model, seed)
    return model.eval()


def build_timm(family: Family | str, like: Any = None):  # -> torch.nn.Module
    """The family's network built by timm directly (unwrapped, eval mode); with ``like`` (a model from
    :func:`build`), its weights and buffers are loaded from it, so both compute the same function."""
    import timm

    import robustvit.models  # noqa: F401  (registers robustvit's architectures with timm)

    fam = get_family(family) if isinstance(family, str) else family
    net = timm.create_model(fam.model, pretrained=False, **fam.build_kwargs)
    if like is not None:
        net.load_state_dict(like.net.state_dict(), strict=True)
    return net.eval()


def example_input(model: Any, n: int = 2, seed: int = 0) -> torch.Tensor:
    """(n, 3, S, S) images in [0, 1] at the model's input size, seeded."""
    s = int(model.spec.image_size)
    return torch.rand(n, 3, s, s, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------------
# fine-tuning adaptations and checkpoint round trips (tests/conformance/test_zoo.py, docs/models.md)
# ---------------------------------------------------------------------------------------------------------
ADAPTATIONS = ("head", "img_size", "patch_size")


def adapt(model: Any, fam: Family, what: str) -> None:
    """Apply one fine-tuning adaptation of ``robustvit.models.finetune`` to ``model`` in place: ``head`` (a new
    5-class head, then given random weights: a zero head would hide a wrong reload), ``img_size`` or
    ``patch_size`` (the family's ``adapt_to`` values). Raises what the adaptation raises."""
    from robustvit.models.finetune import adapt_input, reset_head

    if what == "head":
        reset_head(model, 5)
        head = model.net.get_classifier()
        g = torch.Generator().manual_seed(3)
        mods = [head] if isinstance(head, nn.Module) else list(head)
        with torch.no_grad():
            for p in (q for m in mods for q in m.parameters()):
                p.copy_(torch.randn(p.shape, generator=g))
    elif what == "img_size":
        adapt_input(model, img_size=fam.adapt_to.get("img_size", fam.img_size + 16))
    elif what == "patch_size":
        adapt_input(model, patch_size=fam.adapt_to.get("patch_size", 4))
    else:
        raise ValueError(f"unknown adaptation {what!r}")


def round_trip(model: Any, directory: Any) -> dict[str, Any]:
    """``save_checkpoint`` → ``load_checkpoint`` → the same logits (bit for bit) on ``example_input``:
    {"status": "ok" | "failed", "reason"}."""
    from robustvit.errors import RobustvitError
    from robustvit.models import load_checkpoint, save_checkpoint

    x = example_input(model)
    try:
        with torch.no_grad():
            before = model(x)
        save_checkpoint(model, directory)
        back = load_checkpoint(directory).eval()
        with torch.no_grad():
            after = back(x)
    except RobustvitError as e:
        return {"status": "failed", "reason": f"RobustvitError: {e}"}
    except Exception as e:  # noqa: BLE001
        return {"status": "failed", "reason": f"{type(e).__name__}: {_first_line(e)}"[:300]}
    if after.shape != before.shape or not torch.equal(after, before):
        err = float((after - before).abs().max() / before.abs().max()) if after.shape == before.shape else math.inf
        return {"status": "failed", "reason": f"the reloaded model's logits differ (relative {err:.3g})"}
    return {"status": "ok", "reason": None}


def adaptation_check(fam: Family, what: str, directory: Any, seed: int = 0) -> dict[str, Any]:
    """Build the family, apply ``what`` (None: no adaptation) and round-trip it: ``ok``, ``refused`` (a one-line
    ``RobustvitError`` from the adaptation) or ``failed`` (another error, or a reload that differs)."""
    from robustvit.errors import RobustvitError

    model = build(fam, seed)
    if what is not None:
        try:
            adapt(model, fam, what)
        except RobustvitError as e:
            return {"status": "refused", "reason": str(e)}
        except Exception as e:  # noqa: BLE001
            return {"status": "failed", "reason": f"{type(e).__name__}: {_first_line(e)}"[:300]}
    return round_trip(model, directory)


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), "")
