"""SmoothAdv (Salman et al. 2019): the PGD attack on the smoothed soft classifier stays in the L2 ball and in [0, 1],
raises the smoothed loss above the plain noisy images', equals an optimiser-based recomputation of the reference's
loop step for step, and the ``smoothadv`` loss trains a tiny model on the m noisy adversarial copies."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustvit.certify.smoothadv import smoothadv_pgd, smoothed_log_probs
from robustvit.facade import wrap_module
from robustvit.training.losses import create_loss


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Sequential(nn.Linear(3 * 8 * 8, 16), nn.Tanh(), nn.Linear(16, 4))
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach())
        return self.lin(x.flatten(1))


def setup(n: int = 6, m: int = 3, sigma: float = 0.25):
    net = Net()
    model = wrap_module(net, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), num_classes=4, input_size=8)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, 4, (n,), generator=g)
    noise = sigma * torch.randn(n, m, 3, 8, 8, generator=g)
    return model, net, x, y, noise


def reference_pgd(model, x, y, noise, eps, steps):
    """The reference's loop written with its optimiser: SGD (lr 2ε/steps) on −CE of the mean softmax, gradient
    renormed per image, then clamp to [0, 1] and renorm to ε."""
    n, m = noise.shape[:2]
    delta = torch.zeros_like(x, requires_grad=True)
    opt = torch.optim.SGD([delta], lr=eps / steps * 2)
    for _ in range(steps):
        adv = (x + delta).repeat_interleave(m, 0) + noise.flatten(0, 1)
        soft = F.softmax(model.net((adv - model.mean) / model.std), 1).reshape(n, m, -1).mean(1)
        loss = -F.nll_loss(torch.log(soft.clamp(min=1e-20)), y)
        opt.zero_grad()
        loss.backward()
        delta.grad.div_(delta.grad.view(n, -1).norm(p=2, dim=1).view(-1, 1, 1, 1))
        opt.step()
        delta.data.add_(x)
        delta.data.clamp_(0, 1).sub_(x)
        delta.data.renorm_(p=2, dim=0, maxnorm=eps)
    return (x + delta).detach()


def test_attack_stays_in_the_ball_and_raises_the_smoothed_loss():
    model, _, x, y, noise = setup()
    eps = 0.5
    adv = smoothadv_pgd(model, x, y, noise, eps, steps=5)
    assert adv.min() >= 0 and adv.max() <= 1
    assert ((adv - x).flatten(1).norm(dim=1) <= eps + 1e-5).all()
    assert ((adv - x).flatten(1).norm(dim=1) > 0.9 * eps).sum() >= 4                # it uses its budget
    with torch.no_grad():
        plain = F.nll_loss(smoothed_log_probs(model, x, noise), y, reduction="none")
        attacked = F.nll_loss(smoothed_log_probs(model, adv, noise), y, reduction="none")
    assert (attacked > plain).all()
    torch.testing.assert_close(adv, reference_pgd(model, x, y, noise, eps, 5), rtol=1e-4, atol=1e-5)
    assert torch.equal(smoothadv_pgd(model, x, y, noise, 0.0, steps=2), x)


def test_smoothadv_loss_trains_on_the_noisy_adversarial_copies():
    model, net, x, y, _ = setup()
    loss_fn = create_loss("smoothadv", sigma="0.25", eps="0.5", steps="2", m="3", eps_warmup_epochs="4")
    assert [loss_fn.eps_for(e) for e in (0, 1, 3, 9)] == [0.125, 0.25, 0.5, 0.5]
    before = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss, logits, adv = loss_fn(model.train(), x, y, 3)
    seen = net.seen[-1].view(6, 3, 3, 8, 8)                                   # the training forward: N·m inputs
    assert logits.shape == (6, 4) and adv is None and model.training and loss.requires_grad
    delta = seen - seen.mean(1, keepdim=True)                               # the three draws differ per image
    assert delta.abs().amax() > 0.1 and seen.min() < 0                      # unclipped noise
    loss.backward()
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    single = create_loss("smoothadv", steps="1", m="3", multi_noise="0")
    single(model, x, y, 0)
    assert net.seen[-1].shape == (6, 3, 8, 8)
    assert loss_fn.calls.item() == 1 and single.calls.item() == 1


def test_bad_options_are_one_line():
    from robustvit.errors import RobustvitError

    with pytest.raises(RobustvitError, match="m"):
        create_loss("smoothadv", m="0")
