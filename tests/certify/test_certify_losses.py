"""The training losses of certification: ``gaussian_noise`` feeds the model x + σ·N(0, I) (unclipped, seeded per call
and resumable), ``ablation`` feeds it one retained band per batch (zero-filled, or with the ViT's ablated tokens
dropped, gradients flowing)."""

from __future__ import annotations

import torch
from torch import nn

from robustvit.facade import wrap_module
from robustvit.training.losses import create_loss


class Recorder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3 * 8 * 8, 4)
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        return self.lin(x.flatten(1))


def wrapped() -> tuple[nn.Module, Recorder]:
    net = Recorder()
    return wrap_module(net, mean=(0, 0, 0), std=(1, 1, 1), num_classes=4, input_size=8), net


def test_gaussian_noise_loss_adds_unclipped_seeded_noise():
    model, net = wrapped()
    x, y = torch.rand(64, 3, 8, 8), torch.randint(0, 4, (64,))
    loss_fn = create_loss("gaussian_noise", sigma="0.5")
    loss, logits, adv = loss_fn(model, x, y, 0)
    noise = net.seen[-1] - x
    assert adv is None and logits.shape == (64, 4) and loss.requires_grad
    assert abs(noise.std().item() - 0.5) < 0.02 and abs(noise.mean().item()) < 0.02
    assert net.seen[-1].min() < 0 and net.seen[-1].max() > 1
    loss_fn(model, x, y, 0)
    assert not torch.equal(net.seen[-1], net.seen[-2])                     # a fresh draw per call
    replay = create_loss("gaussian_noise", sigma="0.5")
    replay.load_state_dict({"calls": torch.tensor(1)})                     # a resumed run replays call 1
    replay(model, x, y, 0)
    assert torch.equal(net.seen[-1], net.seen[-2])


def test_ablation_loss_keeps_one_band_per_batch():
    model, net = wrapped()
    x, y = torch.rand(5, 3, 8, 8) * 0.98 + 0.01, torch.randint(0, 4, (5,))
    loss_fn = create_loss("ablation", ablation="column", size="3")
    loss, logits, _ = loss_fn(model, x, y, 0)
    kept = (net.seen[-1] != 0).all(1).all(1)                  # (N, W): columns kept for every image
    assert kept.sum(1).tolist() == [3] * 5 and (kept == kept[0]).all()     # one position per batch, 3 wide
    assert torch.equal(net.seen[-1][:, :, :, kept[0]], x[:, :, :, kept[0]])
    assert loss_fn.resolved()["tokens"] == "zero_fill"
    block = create_loss("ablation", ablation="block", size="2")
    block(model, x, y, 0)
    assert ((net.seen[-1] != 0).all(1)).sum((1, 2)).tolist() == [4] * 5


def test_ablation_loss_drops_vit_tokens_with_gradients(tiny_vit):
    x, y = torch.rand(4, 3, 16, 16), torch.randint(0, 5, (4,))
    loss_fn = create_loss("ablation", size="4")
    loss, _, _ = loss_fn(tiny_vit.train(), x, y, 0)
    loss.backward()
    assert loss_fn.resolved() == {"tokens": "drop", "encoding": "rgb"}
    assert tiny_vit.net.patch_embed.proj.weight.grad.abs().sum() > 0


def test_ablation_loss_trains_a_six_channel_cnn_on_levine_feizi_input():
    """A CNN built with in_chans=6 trains on x and 1 − x of the kept band (zero elsewhere): the first convolution's
    input has those channels and both halves get gradients; the loss says which encoding it used."""
    from robustvit.models import create_model

    torch.manual_seed(0)
    model = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5, in_chans=6).train()
    model.mean.zero_(), model.std.fill_(1.0)                         # [0, 1] pixels, as Levine & Feizi's CIFAR code
    seen: list[torch.Tensor] = []
    conv = model.net.stem[0]
    conv.register_forward_hook(lambda m, i, o: seen.append(i[0].detach()))
    x, y = torch.rand(4, 3, 16, 16) * 0.9 + 0.05, torch.randint(0, 5, (4,))
    loss_fn = create_loss("ablation", size="4")
    loss, _, _ = loss_fn(model, x, y, 0)
    loss.backward()
    inp = seen[-1]
    kept = (inp[:, :3] != 0).all(1).all(1)                                 # (N, W) kept columns
    assert inp.shape == (4, 6, 16, 16) and kept.sum(1).tolist() == [4] * 4
    torch.testing.assert_close(inp[:, 3:] + inp[:, :3], kept[:, None, None, :].float().expand(-1, 3, 16, -1))
    torch.testing.assert_close(inp[:, :3][..., kept[0]], x[..., kept[0]])
    assert conv.weight.grad[:, :3].abs().sum() > 0 and conv.weight.grad[:, 3:].abs().sum() > 0
    assert loss_fn.resolved() == {"tokens": "zero_fill", "encoding": "levine_feizi"}


def test_loss_spec_on_the_command_line_carries_its_options():
    """``--loss smoothadv:sigma=0.5:m=2`` is the loss and its options; ``--loss-option`` overrides the spec's."""
    from robustvit.training import TrainConfig
    from robustvit.training.tasks import create_task

    cfg = TrainConfig.from_dict({}, "command line", {"model": "vit_cifar_micro", "data": "synthshapes:train",
                                                     "out": "unused", "loss": "smoothadv:sigma=0.5:eps=1/4:m=2",
                                                     "loss_options": {"m": 3}})
    cfg.validate()
    opts = create_task(cfg).build_loss().options
    assert cfg.loss == "smoothadv" and (opts.sigma, opts.eps, opts.m) == (0.5, 0.25, 3)
