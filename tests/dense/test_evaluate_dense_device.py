"""``evaluate_dense`` runs on the model's own device by default and never moves the caller's model (the old default
``device="cpu"`` moved a CUDA model to the CPU in place); another device runs a copy."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from robustvit.data import create_dataset
from robustvit.evaluation.suites.dense import evaluate_dense

_spec = importlib.util.spec_from_file_location("robustvit_dense_standins", Path(__file__).with_name("standins.py"))
_standins = sys.modules.get(_spec.name)
if _standins is None:
    _standins = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _standins
    _spec.loader.exec_module(_standins)

SEG = "synthshapes:test,count=6,masks=1"


class WatchedSeg(_standins.SegOracle):
    """The segmentation oracle, its ``.to`` calls recorded by instance."""

    moved: list[int] = []

    def to(self, *args, **kwargs):  # noqa: D102
        WatchedSeg.moved.append(id(self))
        return super().to(*args, **kwargs)


@pytest.fixture
def watched():
    WatchedSeg.moved = []
    ds = create_dataset(SEG)
    return WatchedSeg(ds, 6), ds


def test_default_device_is_the_models_own_and_it_is_not_moved(watched):
    model, ds = watched
    r = evaluate_dense(model, ds, ["seg_clean"], batch_size=4)["seg_clean"]
    assert r["clean_miou"] == pytest.approx(1.0) and r["num_images"] == 6
    assert id(model) not in WatchedSeg.moved and len(model.seen) == 2          # it ran itself, unmoved
    evaluate_dense(model, ds, ["seg_clean"], batch_size=4, device="cpu")        # the device it is on
    assert id(model) not in WatchedSeg.moved and len(model.seen) == 4


def test_another_device_runs_a_copy(watched):
    """A copy on the meta device (nothing can run there: only where the models are is checked)."""
    model, ds = watched
    with pytest.raises((RuntimeError, NotImplementedError)):     # no generator or numbers on meta
        evaluate_dense(model, ds, ["seg_clean"], batch_size=4, device="meta")
    assert id(model) not in WatchedSeg.moved and model._p.device.type == "cpu" and not model.seen


@pytest.mark.gpu
def test_cuda_model_stays_on_its_gpu():
    from robustvit.models.segmenter import create_segmenter

    torch.manual_seed(0)
    seg = create_segmenter("vit_cifar_micro", 11).cuda()
    r = evaluate_dense(seg, "synthshapes:test,masks=1,count=8", ["seg_clean"], batch_size=4)["seg_clean"]
    assert r["num_images"] == 8 and next(seg.parameters()).device.type == "cuda"
    cpu = evaluate_dense(seg, "synthshapes:test,masks=1,count=8", ["seg_clean"], batch_size=4, device="cpu")
    assert next(seg.parameters()).device.type == "cuda"
    assert cpu["seg_clean"]["clean_miou"] == pytest.approx(r["clean_miou"], abs=0.05)   # the same model, another device
