"""The training loop as the references run it: DistributedSampler's order and per-rank seeds, warm-up from
warmup_lr and cool-down epochs, ``last/`` swapped in as one unit, a diverging run stopped with the last good
state kept, fine-tuning that keeps a checkpoint's settings, weight-decay groups (timm's rule; NVlabs's FAN),
DeiT's non-antialiased bicubic resampling and the batched augmentations against torchvision."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.training import TrainConfig, register_loss, train
from robustvit.training.augment import augment_batch, color_jitter, random_crop_flip, random_resized_crop, random_rotation
from robustvit.training.losses import CrossEntropy
from robustvit.training.tasks import build_model
from robustvit.training.trainer import STATE_FILE, batches, build_optimizer, lr_at

TINY = {"embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 16}
DATA = "synthshapes:train,count=32,size=16,classes=4"


def _cfg(out, **kw):
    base = dict(model="vit_cifar_micro", data=DATA, out=str(out), epochs=2, batch_size=16, lr=1e-3,
                model_kwargs=TINY, device="cpu", warmup_epochs=0.5)
    return TrainConfig(**{**base, **kw})


# ---- data order and seeds under data parallelism ---------------------------------------------------------
class _Indexed:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def get_batch(self, idx):
        return idx.float().view(-1, 1, 1, 1).expand(-1, 3, 1, 1).clone(), idx.clone()


@pytest.mark.parametrize("n,world", [(24, 2), (23, 2), (22, 3)])
def test_ranks_take_distributedsampler_slices_of_the_one_order(n, world):
    ds = _Indexed(n)
    (whole,) = [torch.cat([y for _, y, _ in batches(ds, 1000, 5, True)])]
    total = math.ceil(n / world) * world
    padded = torch.cat([whole, whole[: total - n]])                       # DistributedSampler's padding
    per_rank = [[(y, g) for _, y, g in batches(ds, 4, 5, True, rank=r, world=world)] for r in range(world)]
    for r in range(world):
        assert torch.equal(torch.cat([y for y, _ in per_rank[r]]), padded[r::world])   # indices r, r + W, …
    for step in zip(*per_rank):                                           # one global batch per step
        assert len({g for _, g in step}) == 1 and step[0][1] == sum(len(y) for y, _ in step)


@register_loss("_draws_noise")
class _DrawsNoise(CrossEntropy):
    """Records one draw of torch's global generator per step (what drop-path and dropout draw from)."""

    draws: list[float] = []

    def forward(self, model, x, y, epoch):
        _DrawsNoise.draws.append(float(torch.rand(())))
        return super().forward(model, x, y, epoch)


def test_each_rank_draws_its_own_masks(tmp_path, monkeypatch):
    from robustvit.training import trainer

    monkeypatch.setattr(trainer.dist, "all_reduce", lambda t, *a, **k: t)
    seen = {}
    for rank in (0, 1, 0):
        run = trainer.setup_run(_cfg(tmp_path / f"r{rank}", loss="_draws_noise"), resume=False)
        run.rank, run.world = rank, 2
        _DrawsNoise.draws = []
        trainer.train_epoch(run, 0, progress=False)
        seen.setdefault(rank, []).append(list(_DrawsNoise.draws))
    assert seen[0][0] == seen[0][1]                                        # replayable (and on resume)
    assert seen[0][0] != seen[1][0]                                        # but not shared across ranks


# ---- schedule ----------------------------------------------------------------------------------------------
def test_warmup_starts_at_warmup_lr_and_cooldown_stays_at_min_lr(tmp_path):
    assert lr_at(0, 100, 10, 1.0, 0.0, start=1e-6) == pytest.approx(1e-6 + (1 - 1e-6) / 10)
    assert lr_at(150, 100, 10, 1.0, 0.05) == pytest.approx(0.05)
    train(_cfg(tmp_path / "c", epochs=2, cooldown_epochs=1, min_lr=1e-5), progress=False)
    lines = [json.loads(s) for s in (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2, 3] and lines[-1]["lr"] == pytest.approx(1e-5)


# ---- last/ as one unit, divergence -----------------------------------------------------------------------
def test_last_is_swapped_in_whole_and_an_interrupted_swap_recovers(tmp_path, monkeypatch):
    out = tmp_path / "a"
    train(_cfg(out, epochs=1), progress=False)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("last")) == ["last"]
    epoch1 = (out / "last" / "model.safetensors").read_bytes()
    # a crash while the next state is written leaves last/ as it was
    from robustvit.training import trainer

    real = torch.save

    def crash(obj, f, *a, **k):
        if str(f).endswith(STATE_FILE):
            raise KeyboardInterrupt
        return real(obj, f, *a, **k)

    monkeypatch.setattr(trainer.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(out, epochs=3), resume=True, progress=False)
    monkeypatch.setattr(trainer.torch, "save", real)
    assert (out / "last" / "model.safetensors").read_bytes() == epoch1
    assert torch.load(out / "last" / STATE_FILE, weights_only=True)["epoch"] == 0
    # a crash between the two renames: last/ gone, last.old/ complete → resumed from it
    (out / "last").rename(out / "last.old")
    train(_cfg(out, epochs=2), resume=True, progress=False)
    assert not (out / "last.old").exists() and not (out / "last.tmp").exists()
    assert torch.load(out / "last" / STATE_FILE, weights_only=True)["epoch"] == 1


def test_recover_last_prefers_the_complete_new_state(tmp_path):
    import shutil

    from robustvit.training.trainer import recover_last

    out = tmp_path / "r"
    (out / "last").mkdir(parents=True)
    (out / "last" / STATE_FILE).write_text("old")
    shutil.copytree(out / "last", out / "last.tmp")
    (out / "last.tmp" / STATE_FILE).write_text("new")
    (out / "last").rename(out / "last.old")            # crashed between the two renames
    recover_last(out)
    assert (out / "last" / STATE_FILE).read_text() == "new" and sorted(p.name for p in out.iterdir()) == ["last"]
    (out / "last.tmp").mkdir()                          # crashed while writing: last/ stays, the partial copy goes
    recover_last(out)
    assert (out / "last" / STATE_FILE).read_text() == "new" and sorted(p.name for p in out.iterdir()) == ["last"]


@register_loss("_nan_at_epoch_2_step_2")
class _Diverging(CrossEntropy):
    step = 0

    def forward(self, model, x, y, epoch):
        loss, a, b = super().forward(model, x, y, epoch)
        if epoch == 1:
            _Diverging.step += 1
            if _Diverging.step == 2:
                loss = loss * float("nan")
        return loss, a, b


def test_divergence_stops_with_one_line_and_keeps_the_last_good_state(tmp_path):
    out = tmp_path / "d"
    with pytest.raises(RobustvitError, match=r"epoch 2, step 2") as e:
        train(_cfg(out, loss="_nan_at_epoch_2_step_2", epochs=3), progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "--lr" in msg and "--resume" in msg
    assert torch.load(out / "last" / STATE_FILE, weights_only=True)["epoch"] == 0
    assert all(torch.isfinite(v).all() for v in create_model(str(out / "last")).state_dict().values())
    assert not (out / "checkpoint").exists()


# ---- fine-tuning, optimiser groups, position embeddings --------------------------------------------------
def test_finetuning_from_a_checkpoint_keeps_its_settings_and_adds_drop_path(tmp_path):
    ck = train(_cfg(tmp_path / "pre", epochs=1), progress=False)
    ds_cfg = _cfg(tmp_path / "ft", model=str(ck), drop_path=0.1, model_kwargs={"qkv_bias": True})
    from robustvit.data import create_dataset

    model = build_model(ds_cfg, create_dataset(DATA))
    rates = {float(getattr(b.drop_path1, "drop_prob", 0.0)) for b in model.net.blocks}
    assert rates - {0.0} and model.spec.kwargs["drop_path_rate"] == 0.1 and model.spec.kwargs["embed_dim"] == 32
    ref = create_model(str(ck)).eval()
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(model.eval()(x), ref(x), atol=1e-6)       # the same weights


def _groups(model):
    opt = build_optimizer(model, _cfg("x", weight_decay=0.5))
    names = {id(p): n for n, p in model.named_parameters()}
    return ({names[id(p)] for p in opt.param_groups[0]["params"]}, {names[id(p)] for p in opt.param_groups[1]["params"]})


def test_fan_weight_decay_groups_as_nvlabs():
    model = create_model("fan_cifar_micro", num_classes=4)
    decay, no_decay = _groups(model)
    assert "model.blocks.0.mlp.temperature" in decay                          # decayed in NVlabs/FAN
    assert any("pos_embed.token_projection" in n and n.endswith("weight") for n in decay)
    assert {n for n in no_decay if n.endswith("cls_token")} and all(
        n.endswith(".bias") or model.get_parameter(n).ndim <= 1 or n.endswith("cls_token") for n in no_decay)


def test_vit_keeps_its_no_weight_decay_list():
    model = create_model("vit_cifar_micro", num_classes=4, **TINY)
    decay, no_decay = _groups(model)
    assert "model.pos_embed" in no_decay and "model.blocks.0.norm1.weight" in no_decay and "model.blocks.0.attn.qkv.weight" in decay


def test_bicubic_position_embedding_is_deits_without_antialias():
    from robustvit.models.finetune import resample_pos_embed

    pe = torch.randn(1, 1 + 16, 8)
    got = resample_pos_embed(pe, (6, 6), (4, 4), 1, "bicubic")
    grid = pe[:, 1:].reshape(1, 4, 4, 8).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(6, 6), mode="bicubic", align_corners=False)   # DeiT main.py
    assert torch.allclose(got[:, 1:], want.permute(0, 2, 3, 1).reshape(1, 36, 8), atol=1e-6)
    assert torch.equal(got[:, :1], pe[:, :1])


# ---- augmentations ---------------------------------------------------------------------------------------
def test_color_jitter_matches_torchvision_factor_by_factor():
    tvf = pytest.importorskip("torchvision.transforms.functional")
    x = torch.rand(5, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    got = color_jitter(x, torch.Generator().manual_seed(7), 0.4)
    g = torch.Generator().manual_seed(7)
    f = 0.6 + 0.8 * torch.rand(5, 3, generator=g)
    order = torch.rand(5, 3, generator=g).argsort(1)
    ops = [tvf.adjust_brightness, tvf.adjust_contrast, tvf.adjust_saturation]
    for i in range(5):
        img = x[i]
        for k in order[i].tolist():
            img = ops[k](img, float(f[i, k]))
        assert torch.allclose(got[i], img, atol=1e-5)


def test_random_resized_crop_and_rotation_invariants():
    x = torch.rand(3, 3, 12, 12)
    same = random_resized_crop(x, torch.Generator().manual_seed(0), scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert torch.allclose(same, x, atol=1e-5)                               # the whole image, resized to itself
    crop = random_resized_crop(x, torch.Generator().manual_seed(0), scale=(0.25, 0.25), ratio=(1.0, 1.0))
    assert crop.shape == x.shape and not torch.allclose(crop, x)
    assert torch.equal(random_rotation(x, torch.Generator(), 0.0), x)
    rot = random_rotation(x, torch.Generator().manual_seed(1), 30.0)        # nearest: values of x or the zero fill
    assert set(rot.unique().tolist()) <= set(x.unique().tolist()) | {0.0}
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    assert torch.equal(augment_batch(x, g1, padding=2, flip=True), random_crop_flip(x, g2, 2, True))
