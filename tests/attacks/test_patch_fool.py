"""Patch-Fool (Fu et al., ICLR 2022): attention-chosen patch, replaced and optimised."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from robustvit.attacks import create_attack
from robustvit.attacks.patch_fool import patch_mask, pcgrad
from robustvit.errors import RobustvitError
from robustvit.models.probe import ViTProbe


def images(n: int = 6, seed: int = 0) -> torch.Tensor:
    """Blocky images (one random colour per 4×4 patch): varied enough for a random ViT to tell apart."""
    x = torch.rand(n, 3, 4, 4, generator=torch.Generator().manual_seed(seed))
    return x.repeat_interleave(4, 2).repeat_interleave(4, 3)


def test_patch_mask_marks_whole_patches():
    m = patch_mask(torch.tensor([[0], [5]]), (4, 4), 4)
    assert m.shape == (2, 1, 16, 16) and m[0].sum() == 16 and m[1].sum() == 16
    assert m[0, 0, :4, :4].all() and m[1, 0, 4:8, 4:8].all()          # patch 5 = row 1, column 1


def test_pcgrad_projects_only_conflicting_gradients():
    main = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    aux = torch.tensor([[-1.0, 1.0], [1.0, 1.0]])
    out = pcgrad(aux, main)
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0], [1.0, 1.0]]))   # conflict removed; agreement kept


def test_attacks_the_most_attended_patch_and_nothing_else(tiny_vit16):
    x = images()
    with torch.no_grad():
        y = tiny_vit16(x).argmax(1)
    atk = create_attack("patch_fool", tiny_vit16, steps=5, attn_block=2, seed=0)
    x_adv = atk(x, y)
    probe = ViTProbe(tiny_vit16)
    with torch.no_grad():
        attn = probe.run(x, attentions=True).attentions[2]
    expected = attn.mean(1).mean(1)[:, probe.num_prefix_tokens:].argmax(1)
    assert torch.equal(atk.last_patches[:, 0], expected)
    changed = (x_adv - x).abs().sum(1, keepdim=True) > 0
    mask = patch_mask(expected[:, None], probe.grid_size, probe.patch_size).bool()
    assert not (changed & ~mask).any()                  # only the chosen patch changes
    assert changed.flatten(1).any(1).all()


def test_optimisation_raises_the_loss_and_fools(tiny_vit16):
    x = images(8, seed=3)
    with torch.no_grad():
        y = tiny_vit16(x).argmax(1)
        before = F.cross_entropy(tiny_vit16(x), y, reduction="none")
    atk = create_attack("patch_fool", tiny_vit16, num_patches=4, steps=40, seed=0)
    x_adv = atk(x, y)
    with torch.no_grad():
        logits = tiny_vit16(x_adv)
    assert (F.cross_entropy(logits, y, reduction="none") > before).float().mean() >= 0.75
    assert (logits.argmax(1) != y).float().mean() >= 0.5


def test_attention_loss_draws_attention_to_the_patch(tiny_vit16):
    x = images(8, seed=4)
    with torch.no_grad():
        y = tiny_vit16(x).argmax(1)
    probe = ViTProbe(tiny_vit16)
    common = dict(steps=15, selection="random", seed=1)
    plain = create_attack("patch_fool", tiny_vit16, attn_weight=0.0, **common)
    aware = create_attack("patch_fool", tiny_vit16, attn_weight=50.0, **common)
    xp, xa = plain(x, y), aware(x, y)
    assert torch.equal(plain.last_patches, aware.last_patches)
    tok = aware.last_patches[:, 0] + probe.num_prefix_tokens

    def received(z: torch.Tensor) -> float:
        with torch.no_grad():
            a = probe.run(z, attentions=True).attentions[1].mean(1)
        return a.gather(2, tok.view(-1, 1, 1).expand(-1, a.shape[1], 1)).mean().item()

    assert received(xa) > received(xp)


def test_mild_variant_is_bounded_and_targeted_mode(tiny_vit16):
    x = images(6, seed=5)
    with torch.no_grad():
        y = tiny_vit16(x).argmax(1)
    x_adv = create_attack("patch_fool", tiny_vit16, eps="8/255", steps=5)(x, y)
    assert (x_adv - x).abs().max() <= 8 / 255 + 1e-6
    target = (y + 1) % 10
    tgt = create_attack("patch_fool", tiny_vit16, targeted=True, num_patches=8, steps=60, seed=0)
    with torch.no_grad():
        hit = (tiny_vit16(tgt(x, target)).argmax(1) == target).float().mean()
    assert hit >= 0.5


def test_non_vit_models_get_a_clear_error():
    with pytest.raises(RobustvitError, match="ViT probe does not support"):
        create_attack("patch_fool", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 10)))
    with pytest.raises(RobustvitError, match="selection"):
        from timm.models.vision_transformer import VisionTransformer
        create_attack("patch_fool", VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2),
                      selection="best")


def test_final_scoring_is_the_last_iterate_and_best_keeps_any_fooling_one(tiny_vit16):
    """The reference scores the final iterate; ``scoring="best"`` returns, per image, a fooling iterate when
    there was one, so it fools every image the final iterate fools, and possibly more."""
    x = images(8, seed=4)
    with torch.no_grad():
        y = tiny_vit16(x).argmax(1)
    kw = dict(num_patches=2, steps=12, seed=0)
    final = create_attack("patch_fool", tiny_vit16, **kw)
    assert final.scoring == "final"
    best = create_attack("patch_fool", tiny_vit16, scoring="best", **kw)
    xf, xb = final(x, y), best(x, y)
    with torch.no_grad():
        fooled_f, fooled_b = tiny_vit16(xf).argmax(1) != y, tiny_vit16(xb).argmax(1) != y
    assert bool((fooled_b | ~fooled_f).all()) and int(fooled_b.sum()) >= int(fooled_f.sum())
    # where best found nothing it returns the final iterate, which is what "final" returns (same seed)
    assert torch.equal(xb[~fooled_b], xf[~fooled_b])
    with pytest.raises(RobustvitError, match="scoring"):
        create_attack("patch_fool", tiny_vit16, scoring="strongest")


def test_class_map_patch_fool_optimises_in_the_data_label_space():
    """With a class map (``Normalized.map_classes``) the probe's logits are the wrapper's — one per data class,
    each the best of its model classes — so Patch-Fool's cross-entropy is the wrapper's. (The probe used to
    call the head itself: 10 model-class logits scored against data labels.)"""
    from robustvit.models import create_model

    torch.manual_seed(0)
    model = create_model("vit_cifar_tiny", embed_dim=32, depth=4, num_heads=2, img_size=16, num_classes=10).eval()
    with torch.no_grad():
        model.net.head.weight.normal_(0, 1.0)
    model.map_classes([[0, 3], [1, 4, 5], [2, 6, 7, 8, 9]])
    x = images(8, seed=6)
    with torch.no_grad():
        y = model(x).argmax(1)
    atk = create_attack("patch_fool", model, num_patches=4, steps=30, seed=0)
    with torch.no_grad():
        logits = atk.probe.run(x, tokens=False).logits
        wrapped = model(x)
        raw = model.net((x - model.mean) / model.std)
    assert logits.shape == wrapped.shape == (8, 3)
    torch.testing.assert_close(logits, wrapped, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, torch.stack([raw[:, [0, 3]].amax(1), raw[:, [1, 4, 5]].amax(1),
                                                    raw[:, 2:3].amax(1).maximum(raw[:, 6:].amax(1))], 1))
    torch.testing.assert_close(F.cross_entropy(logits, y), F.cross_entropy(wrapped, y))
    x_adv = atk(x, y)
    with torch.no_grad():
        after = F.cross_entropy(model(x_adv), y, reduction="none")
    assert (after > F.cross_entropy(wrapped, y, reduction="none")).float().mean() >= 0.75


def test_registers_are_not_attacked_patches():
    """A ViT with registers and no CLS token: the attention-chosen patch is a patch token, never a register."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=4, num_heads=2, num_classes=10,
                            class_token=False, reg_tokens=3, global_pool="avg").eval()
    with torch.no_grad():
        vit.reg_token.normal_(0, 1.0)
    x = images(4, seed=2)
    atk = create_attack("patch_fool", vit, steps=2, attn_block=1, seed=0)
    assert atk.probe.num_registers == 3 and not atk.probe.has_class_token and atk.probe.num_prefix_tokens == 3
    with torch.no_grad():
        a = atk.probe.run(x, attentions=True).attentions[1]
    expected = a.mean(1).mean(1)[:, 3:].argmax(1)
    atk(x, vit(x).argmax(1))
    assert torch.equal(atk.last_patches[:, 0], expected)
