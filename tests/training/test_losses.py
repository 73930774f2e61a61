import pytest
import torch
import torch.nn.functional as F

from robustvit.attacks import create_attack
from robustvit.errors import RobustvitError
from robustvit.training import create_loss, list_losses
from robustvit.training.schedules import eps_at


def _ce(model, x, y):
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(x), y).item()


def test_registry_lists_the_robust_losses():
    assert {"ce", "pgd_at", "fgsm_rs", "trades", "afat", "afat_random", "afat_patchdrop"} <= set(list_losses())
    with pytest.raises(RobustvitError, match="has no option"):
        create_loss("fgsm_rs", attack_steps=3)


@pytest.mark.parametrize("name,opts", [("fgsm_rs", {}), ("pgd_at", {"attack_steps": 1}), ("pgd_at", {"attack_steps": 3})])
def test_one_adversarial_step_increases_the_loss(tiny_vit, batch, name, opts):
    x, y = batch
    loss_fn = create_loss(name, eps="8/255", label_smoothing=0.0, **opts)
    tiny_vit.train()
    loss, clean, adv = loss_fn(tiny_vit, x, y, epoch=0)
    assert tiny_vit.training                                 # the attack restored train mode
    assert loss.requires_grad and adv is not None and clean.shape == adv.shape == (16, 4)
    # the loss is CE on x_adv: recompute x_adv with the same seed and compare with the clean loss
    loss_fn2 = create_loss(name, eps="8/255", label_smoothing=0.0, **opts)
    step = loss_fn2.step_for(8 / 255)
    atk = create_attack("pgd", tiny_vit, eps="8/255", steps=loss_fn2.options.attack_steps, step_size=step,
                        seed=loss_fn2.next_seed())
    x_adv = atk(x, y)
    assert (x_adv - x).abs().max() <= 8 / 255 + 1e-6
    assert _ce(tiny_vit, x_adv, y) >= _ce(tiny_vit, x, y)
    tiny_vit.eval()
    assert torch.allclose(F.cross_entropy(tiny_vit(x_adv), y), loss, atol=1e-5)   # eval == train for this ViT


def test_fgsm_rs_uses_a_step_of_1_25_eps():
    assert create_loss("fgsm_rs", eps="4/255").step_for(4 / 255) == pytest.approx(1.25 * 4 / 255)
    assert create_loss("pgd_at", eps="4/255", attack_steps=4).step_for(4 / 255) == pytest.approx(1.5 * 4 / 255 / 4)


def test_trades_with_beta_zero_equals_ce(tiny_vit, batch):
    x, y = batch
    tiny_vit.train()
    loss, clean, adv = create_loss("trades", beta=0.0, eps="8/255", attack_steps=2, label_smoothing=0.1)(tiny_vit, x, y, 0)
    ref = F.cross_entropy(tiny_vit(x), y, label_smoothing=0.1)
    assert torch.allclose(loss, ref, atol=1e-6)
    loss6, _, _ = create_loss("trades", beta=6.0, eps="8/255", attack_steps=2, label_smoothing=0.1)(tiny_vit, x, y, 0)
    assert loss6.item() > ref.item()                         # β·KL > 0 once the inner attack moved the output


def test_trades_inner_attack_increases_the_kl(tiny_vit, batch):
    x, _ = batch
    tiny_vit.eval()
    with torch.no_grad():
        p = F.softmax(tiny_vit(x), 1)

    def kl(z, idx):
        return F.kl_div(F.log_softmax(z, 1), p[idx], reduction="none").sum(1)

    idx = torch.arange(len(x))
    start = create_attack("pgd", tiny_vit, eps="8/255", steps=1, step_size=0.0, loss=kl, seed=3)(x, idx)  # start only
    adv = create_attack("pgd", tiny_vit, eps="8/255", steps=5, step_size="2/255", loss=kl, seed=3)(x, idx)
    with torch.no_grad():
        assert kl(tiny_vit(adv), idx).mean() > kl(tiny_vit(start), idx).mean()


def test_pgd_loss_option_defaults_to_cross_entropy(tiny_vit, batch):
    x, y = batch
    a = create_attack("pgd", tiny_vit, eps="4/255", steps=2, seed=1)(x, y)
    b = create_attack("pgd", tiny_vit, eps="4/255", steps=2, seed=1,
                      loss=lambda z, t: F.cross_entropy(z, t, reduction="none"))(x, y)
    assert torch.equal(a, b)


def test_eps_schedules():
    assert eps_at(0, 0.1, "linear", 5) == 0.0 and eps_at(2, 0.1, "linear", 5) == pytest.approx(0.04)
    assert eps_at(5, 0.1, "linear", 5) == 0.1 and eps_at(0, 0.1, "constant", 5) == 0.1
    with pytest.raises(RobustvitError, match="eps schedule"):
        eps_at(0, 0.1, "cosine", 5)


def test_linear_warmup_trains_on_clean_images_at_epoch_zero(tiny_vit, batch):
    x, y = batch
    tiny_vit.eval()
    loss_fn = create_loss("pgd_at", eps="8/255", eps_schedule="linear", eps_warmup_epochs=3, label_smoothing=0.0)
    loss, _, _ = loss_fn(tiny_vit, x, y, epoch=0)
    assert torch.allclose(loss, F.cross_entropy(tiny_vit(x), y), atol=1e-6)
    assert int(loss_fn.calls) == 0                            # no attack ran
    loss_fn(tiny_vit, x, y, epoch=1)
    assert int(loss_fn.calls) == 1


def test_ce_takes_soft_targets(tiny_vit, batch):
    x, y = batch
    soft = F.one_hot(y, 4).float()
    a, _, _ = create_loss("ce", label_smoothing=0.0)(tiny_vit, x, soft, 0)
    b, _, _ = create_loss("ce", label_smoothing=0.0)(tiny_vit, x, y, 0)
    assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("name", ["pgd_at", "fgsm_rs", "trades"])
def test_attack_mode_train_keeps_a_vit_in_train_mode_during_the_attack(tiny_vit, batch, name):
    x, y = batch
    modes = []
    hook = tiny_vit.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    tiny_vit.train()
    loss, _, _ = create_loss(name, eps="8/255", attack_mode="train", **({"attack_steps": 2} if name != "fgsm_rs" else {}))(
        tiny_vit, x, y, 0)
    hook.remove()
    assert torch.isfinite(loss) and tiny_vit.training
    if name == "trades":
        assert all(modes) and len(modes) == 1 + 2 + 2      # p_clean, 2 attack steps, clean and adversarial forwards
    else:                                               # attack and training forwards in train mode, then the
        assert all(modes[:-1]) and modes[-1] is False   # eval-mode clean forward behind train_acc
    modes.clear()
    hook = tiny_vit.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    create_loss(name, eps="8/255", **({"attack_steps": 2} if name != "fgsm_rs" else {}))(tiny_vit, x, y, 0)
    hook.remove()
    assert not all(modes)                               # default: the attack runs in eval mode
