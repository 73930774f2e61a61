"""BatchNorm sees what the references' BN sees: PGD-AT/FGSM-RS forward only the adversarial batch in train mode
(MadryLab/robustness, locuslab/fast_adversarial), TRADES forwards clean and adversarial batches separately
(yaodongyu/TRADES), and an attack in ``attack_mode=train`` runs (and updates BN) in train mode as Wong et al."""

import pytest
import torch
from torch import nn

from robustvit.training import create_loss


class TinyBN(nn.Module):
    """conv → BatchNorm → ReLU → pool → linear; records every train-mode BN input batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)
        self.seen: list[torch.Tensor] = []
        self.bn.register_forward_hook(lambda m, a, o: self.seen.append(a[0].detach().clone()) if m.training else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(3)
    return torch.rand(8, 3, 8, 8, generator=g), torch.randint(0, 3, (8,), generator=g)


def _expected_running_mean(batches):
    rm = torch.zeros(4)
    for b in batches:
        rm = 0.9 * rm + 0.1 * b.mean((0, 2, 3))
    return rm


@pytest.mark.parametrize("name", ["pgd_at", "fgsm_rs"])
def test_adversarial_losses_update_bn_with_the_adversarial_batch_only(name, data):
    x, y = data
    model = TinyBN().train()
    loss, clean, adv = create_loss(name, eps="8/255", attack_steps=2)(model, x, y, 0) if name == "pgd_at" else \
        create_loss(name, eps="8/255")(model, x, y, 0)
    assert int(model.bn.num_batches_tracked) == 1 and len(model.seen) == 1
    with torch.no_grad():
        assert not torch.allclose(model.seen[0], model.conv(x))          # not the clean batch
    assert torch.allclose(model.bn.running_mean, _expected_running_mean(model.seen), atol=1e-6)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(clean, model(x), atol=1e-6)                 # train_acc's logits: clean, eval mode


def test_clean_forward_options(data):
    x, y = data
    model = TinyBN().train()
    create_loss("pgd_at", eps="8/255", clean_forward="train")(model, x, y, 0)
    assert int(model.bn.num_batches_tracked) == 2                         # the old behaviour, on request
    with torch.no_grad():
        assert torch.allclose(model.seen[-1], model.conv(x))              # … the clean batch last
    model = TinyBN().train()
    _, clean, adv = create_loss("pgd_at", eps="8/255", clean_forward="none")(model, x, y, 0)
    assert int(model.bn.num_batches_tracked) == 1 and torch.equal(clean, adv.detach())


def test_fgsm_in_train_mode_updates_bn_during_the_attack(data):
    x, y = data
    model = TinyBN().train()
    create_loss("fgsm_rs", eps="8/255", attack_mode="train")(model, x, y, 0)
    assert int(model.bn.num_batches_tracked) == 2 and model.training   # attack forward + training forward
    model = TinyBN().train()
    create_loss("fgsm_rs", eps="8/255", attack_mode="eval")(model, x, y, 0)
    assert int(model.bn.num_batches_tracked) == 1 and model.training


@pytest.mark.parametrize("forward,sizes", [("separate", [8, 8]), ("concat", [16])])
def test_trades_forwards(forward, sizes, data):
    x, y = data
    model = TinyBN().train()
    loss, clean, adv = create_loss("trades", eps="8/255", attack_steps=2, forward=forward)(model, x, y, 0)
    assert [len(b) for b in model.seen] == sizes                         # the attack ran in eval mode
    if forward == "separate":
        with torch.no_grad():
            assert torch.allclose(model.seen[0], model.conv(x))          # clean first, then adversarial
            assert not torch.allclose(model.seen[1], model.conv(x))
    assert torch.allclose(model.bn.running_mean, _expected_running_mean(model.seen), atol=1e-6)


def test_trades_inner_attack_as_the_reference(data):
    """Start x + 0.001·N(0, 1), 10 steps of 0.007 on the summed KL, projection to ε = 0.031: recomputed here."""
    import torch.nn.functional as F

    from robustvit.utils import derive_seed

    x, _ = data
    model = TinyBN().eval()
    loss = create_loss("trades")
    got = loss.inner_attack(model, x, float(loss.options.eps))
    gen = torch.Generator().manual_seed(derive_seed(0, "attack", 0, 0) % 2**31)
    with torch.no_grad():
        p = F.softmax(model(x), 1)
    xa = (x + 0.001 * torch.randn(x.shape, generator=gen)).clamp(0, 1)
    for _ in range(10):
        xa.requires_grad_(True)
        kl = F.kl_div(F.log_softmax(model(xa), 1), p, reduction="sum")
        (g,) = torch.autograd.grad(kl, xa)
        xa = torch.min(torch.max(xa.detach() + 0.007 * g.sign(), x - 0.031), x + 0.031).clamp(0, 1)
    assert torch.allclose(got, xa, atol=1e-6)
    assert (got - x).abs().max() <= 0.031 + 1e-6
