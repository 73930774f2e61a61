"""Every ImageNet-P / CIFAR-P sequence is bit-identical to the recorded one.

``fixtures/perturbation_sequences.sha256.json`` holds, for every perturbation × preset × difficulty (1–3 for
the noise sequences) × two seeds, plus a cropped run in blocks of 4 frames, the shape and the first 16 hex
digits of the sha256 of the float32 frames and of their uint8 (floor) version. The hashes were recorded with
the implementation that kept the per-preset tables in parallel dicts, before each perturbation became a
registered spec, and guard the sequences against any change.
"""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from robustvit.corruptions.perturbations import iter_perturbation_frames, list_perturbations, perturbation_sequence

GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "perturbation_sequences.sha256.json").read_text())
SIZES = {"cifar": (20, 18), "imagenet": (36, 40)}


def _images(n: int, h: int, w: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    base = torch.stack([xx, yy, 0.5 * (xx + yy)])
    return (0.7 * base + 0.3 * torch.rand(n, 3, h, w, generator=g)).clamp(0, 1)


def _digest(t: torch.Tensor) -> list:
    f = hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
    u8 = (t * 255).floor().clamp(0, 255).to(torch.uint8).contiguous()
    return [list(t.shape), f, hashlib.sha256(u8.numpy().tobytes()).hexdigest()[:16]]


def test_the_record_covers_every_perturbation():
    names = {k.split("/")[0] for k in GOLDEN}
    assert names == set(list_perturbations("all")) and len(names) == 14


@pytest.fixture
def one_thread():
    """The record was made with one intra-op thread: torch's CPU float32 FFTs (motion_blur's) differ in the last
    bit with two (≤ 2e-7; the uint8 frames do not), so the hashes are compared at the count they were made with."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("preset", sorted(SIZES))
@pytest.mark.parametrize("name", list_perturbations("all"))
def test_sequences_are_bit_identical_to_the_record(name, preset, one_thread):
    h, w = SIZES[preset]
    x = _images(2, h, w, 5)
    for d in ((1, 2, 3) if "noise" in name else (1,)):
        for seed in (0, 7):
            key = f"{name}/{preset}/d{d}/s{seed}"
            assert _digest(perturbation_sequence(x, name, difficulty=d, seed=seed, preset=preset)) == GOLDEN[key], key
    blocks = iter_perturbation_frames(x, name, seed=3, preset=preset, crop=(h - 4, w - 6), block_frames=4)
    key = f"{name}/{preset}/crop/s3"
    assert _digest(torch.cat([f for _, f in blocks], 1)) == GOLDEN[key], key
