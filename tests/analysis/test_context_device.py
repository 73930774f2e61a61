"""``make_context`` runs on the model's own device by default and never moves the caller's model: a CUDA model
stays on its GPU (the old default ``device="cpu"`` moved it to the CPU in place); another device gets a copy."""

import pytest
import torch
from torch import nn

from robustvit.analysis.base import make_context, model_device, model_on


class Watched(nn.Module):
    """A small model whose ``.to`` calls are recorded (on this instance only, not on a copy of it)."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))
        self._log = log

    def to(self, *args, **kwargs):  # noqa: D102
        self._log.append((id(self), args, kwargs))
        return super().to(*args, **kwargs)

    def forward(self, x):  # noqa: D102
        return self.lin(x) * self.scale


def test_default_device_is_the_models_own_and_the_model_is_not_moved():
    log: list = []
    model = Watched(log)
    ctx = make_context(model)
    assert ctx.model is model and ctx.device == torch.device("cpu")
    assert not [c for c in log if c[0] == id(model)]
    ctx = make_context(model, device="cpu")                 # the device it is on: still the model itself
    assert ctx.model is model and not [c for c in log if c[0] == id(model)]


def test_a_model_on_another_device_stays_there():
    """A model on the meta device stands for a CUDA model on a machine without one: no copy to the CPU."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(3, 2))
    ctx = make_context(model)
    assert ctx.model is model and ctx.device == torch.device("meta")
    assert next(model.parameters()).device.type == "meta"


def test_an_explicit_other_device_runs_a_copy_and_leaves_the_callers_model():
    log: list = []
    model = Watched(log)
    ctx = make_context(model, device="meta")
    assert ctx.model is not model and ctx.device == torch.device("meta")
    assert all(t.device.type == "meta" for t in ctx.model.state_dict().values())
    assert all(t.device.type == "cpu" for t in model.state_dict().values())
    assert not [c for c in log if c[0] == id(model)]


def test_model_device():
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.ReLU()) == torch.device("cpu")                 # nothing to go by: the CPU
    with torch.device("meta"):
        assert model_device(nn.BatchNorm1d(2)) == torch.device("meta")
    buffers_only = nn.Module()
    buffers_only.register_buffer("b", torch.zeros(1, device="meta"))
    assert model_device(buffers_only) == torch.device("meta")


def test_model_on_copies_tied_weights_once():
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    model[1].weight = model[0].weight
    copy, dev = model_on(model, "meta")
    assert dev == torch.device("meta") and copy[1].weight is copy[0].weight
    assert isinstance(copy[0].weight, nn.Parameter) and copy[0].weight.requires_grad
    assert model[0].weight.device.type == "cpu"


@pytest.mark.gpu
def test_cuda_model_stays_on_its_gpu(tiny_vit, tiny_data):
    from robustvit.analysis import lesion

    model = tiny_vit.cuda()
    ctx = make_context(model, tiny_data)
    assert ctx.model is model and ctx.device.type == "cuda"
    lesion(model, tiny_data, samples=2, batch_size=12)
    assert next(model.parameters()).device.type == "cuda"
    cpu = make_context(model, tiny_data, device="cpu")
    assert cpu.model is not model and next(model.parameters()).device.type == "cuda"
