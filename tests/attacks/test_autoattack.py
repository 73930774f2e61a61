"""AutoAttack: ensemble bookkeeping, versions, class-count adaptation, missing members, report."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from robustvit.attacks import base, create_attack
from robustvit.attacks.autoattack import VERSIONS
from robustvit.errors import RobustvitError

EPS = 1.5 / 255


def acc(model, x, y) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def run(model, x, y, **kw):
    atk = create_attack("autoattack", model, eps=EPS, steps=10, seed=0, **kw)
    return atk, atk(x, y)


class Recorder(base.Attack):
    """A stand-in member that records its options and perturbs nothing."""

    seen: list[dict] = []

    @dataclass
    class Options(base.Attack.Options):
        restarts: int = 1
        n_target_classes: int = 9
        n_queries: int = 10
        p_init: float = 0.8
        steps: int = 100

    def __init__(self, model, **kw):
        super().__init__(model, **kw)
        Recorder.seen.append({**dataclasses.asdict(self.opts), "name": self.name})

    def perturb(self, x, y):
        return x


def stub(name: str) -> type[base.Attack]:
    return type(f"Stub_{name}", (Recorder,), {"name": name})


def test_custom_ensemble_is_worst_case_and_monotone(tiny_model, batch):
    x, y = batch
    one, x1 = run(tiny_model, x, y, version="custom", attacks=["apgd_ce"])
    two, x2 = run(tiny_model, x, y, version="custom", attacks=["apgd_ce", "apgd_t", "apgd_dlr"])
    r = two.last_report
    assert r["clean_accuracy"] == acc(tiny_model, x, y)
    accs = [r["clean_accuracy"], *r["per_attack"].values()]
    assert accs == sorted(accs, reverse=True)
    assert r["robust_accuracy"] == accs[-1] == acc(tiny_model, x2, y)
    assert one.last_report["per_attack"]["apgd_ce"] == r["per_attack"]["apgd_ce"]
    assert r["robust_accuracy"] <= one.last_report["robust_accuracy"]
    assert (x2 - x).abs().max() <= EPS + 1e-6
    assert set(r) >= {"version", "attacks", "eps", "norm", "seed", "n", "clean_accuracy", "per_attack",
                      "robust_accuracy", "time_s", "flags"}
    assert {"randomized", "softmax_output", "zero_gradients", "n_classes", "blackbox_stronger"} <= set(r["flags"])
    # points robust after the ensemble are returned unchanged, fooled points are adversarial
    with torch.no_grad():
        still = tiny_model(x2).argmax(1) == y
    assert torch.equal(x2[still], x[still])


def test_deterministic_under_seed(tiny_model, batch):
    x, y = batch
    _, a = run(tiny_model, x, y, version="custom", attacks=["apgd_ce", "apgd_t"])
    _, b = run(tiny_model, x, y, version="custom", attacks=["apgd_ce", "apgd_t"])
    assert torch.equal(a, b)


def test_standard_version_builds_members_from_registry(tiny_model, batch, monkeypatch):
    x, y = batch
    base.ATTACKS.list()                      # the built-ins registered first, then replaced by stubs
    for name in ("fab_t", "square"):
        monkeypatch.setitem(base.ATTACKS._items, name, stub(name))
    Recorder.seen.clear()
    atk = create_attack("autoattack", tiny_model, eps=EPS, seed=7, member_kwargs={"apgd_ce": {"steps": 3},
                                                                                  "apgd_t": {"steps": 3}})
    atk(x, y)
    assert atk.last_report["attacks"] == ["apgd_ce", "apgd_t", "fab_t", "square"]
    seen = {s["name"]: s for s in Recorder.seen}
    assert seen["fab_t"]["n_target_classes"] == 9 and seen["fab_t"]["restarts"] == 1
    assert seen["square"]["n_queries"] == 5000
    assert all(s["eps"] == EPS and s["seed"] == 7 for s in seen.values())


def test_versions_match_the_reference():
    names = {v: [n for n, _ in members] for v, members in VERSIONS.items()}
    assert names["standard"] == ["apgd_ce", "apgd_t", "fab_t", "square"]
    assert names["plus"] == ["apgd_ce", "apgd_dlr", "fab", "square", "apgd_t", "fab_t"]
    assert names["rand"] == ["apgd_ce", "apgd_dlr"]
    assert all(kw.get("eot_iter") == 20 for _, kw in VERSIONS["rand"])


def test_square_member_uses_the_reference_schedule(tiny_model):
    """fra31/auto-attack builds Square with n_queries=5000, p_init=.8, resc_schedule=False: its p_selection
    then counts iterations as they are (hand-computed values of the reference's piecewise schedule)."""
    from robustvit.attacks.square import p_schedule

    for version in ("standard", "plus"):
        atk = create_attack("autoattack", tiny_model, version=version)
        square = atk.build_member("square", dict(VERSIONS[version])["square"], n_classes=10)
        assert (square.n_queries, square.p_init, square.rescale_schedule) == (5000, 0.8, False)
    expected = {0: .8, 10: .8, 11: .4, 50: .4, 200: .2, 500: .1, 1000: .05, 2000: .025, 4000: .0125, 4999: .00625}
    for it, p in expected.items():
        assert p_schedule(it, square.n_queries, square.p_init, square.rescale_schedule) == pytest.approx(p)


def test_target_count_adapts_to_classes(make_linear, make_images, monkeypatch):
    base.ATTACKS.list()                      # the built-ins registered first, then replaced by a stub
    monkeypatch.setitem(base.ATTACKS._items, "fab_t", stub("fab_t"))
    model = make_linear(5).eval()
    x = make_images(6)
    with torch.no_grad():
        y = model(x).argmax(1)
    Recorder.seen.clear()
    atk, _ = run(model, x, y, version="custom", attacks=["apgd_t", "fab_t"])
    assert atk.last_report["n_target_classes"] == 4
    assert Recorder.seen[-1]["n_target_classes"] == 4
    three = make_linear(3).eval()
    with torch.no_grad():
        y3 = three(x).argmax(1)
    with pytest.warns(UserWarning, match="n_classes"), pytest.warns(UserWarning, match="skipped"):
        atk, _ = run(three, x, y3, version="custom", attacks=["apgd_ce", "apgd_t"])
    assert "apgd_t" not in atk.last_report["per_attack"]
    assert atk.last_report["flags"]["n_classes"]["flag"]


def test_missing_member_is_a_clear_error_or_skipped(tiny_model, batch):
    x, y = batch
    with pytest.raises(RobustvitError, match="not registered"):
        create_attack("autoattack", tiny_model, version="custom", attacks=["apgd_ce", "no-such-attack"])
    with pytest.warns(UserWarning, match="no-such-attack"):
        atk, _ = run(tiny_model, x, y, version="custom", attacks=["apgd_ce", "no-such-attack"], skip_missing=True)
    assert atk.last_report["flags"]["skipped_members"]["flag"]


def test_bad_configuration(tiny_model):
    with pytest.raises(RobustvitError, match="version"):
        create_attack("autoattack", tiny_model, version="fast")
    with pytest.raises(RobustvitError, match="custom"):
        create_attack("autoattack", tiny_model, version="custom")
    with pytest.raises(RobustvitError, match="only used"):
        create_attack("autoattack", tiny_model, attacks=["apgd_ce"])
    with pytest.raises(RobustvitError, match="targeted"):
        create_attack("autoattack", tiny_model, targeted=True)


def test_rand_version_and_batching(tiny_model, batch):
    x, y = batch
    atk, x_adv = run(tiny_model, x, y, version="rand", member_kwargs={"apgd_ce": {"eot_iter": 2},
                                                                       "apgd_dlr": {"eot_iter": 2}}, batch_size=3)
    assert "randomized" not in atk.last_report["flags"]
    assert list(atk.last_report["per_attack"]) == ["apgd_ce", "apgd_dlr"]
    assert (x_adv - x).abs().max() <= EPS + 1e-6


def test_l2(tiny_model, batch):
    x, y = batch
    atk = create_attack("autoattack", tiny_model, norm="l2", eps=0.2, steps=5, version="custom",
                        attacks=["apgd_ce", ("apgd_t", {"n_target_classes": 2})])
    x_adv = atk(x, y)
    assert ((x_adv - x).flatten(1).norm(dim=1) <= 0.2 + 1e-5).all()


def test_members_never_see_an_empty_batch():
    """Once no point is robust, later members are not called (an empty chunk crashes e.g. Swin's windows)."""
    calls = []

    class Wrong(torch.nn.Module):                # misclassifies everything; refuses empty batches like Swin
        def forward(self, x):
            calls.append(len(x))
            if len(x) == 0:
                raise RuntimeError("cannot reshape 0 images")
            logits = torch.zeros(len(x), 3)
            logits[:, 2] = 1.0 + x.flatten(1).sum(1) * 0
            return logits

    x, y = torch.rand(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)
    atk, adv = run(Wrong(), x, y)
    assert atk.last_report["clean_accuracy"] == 0.0 and atk.last_report["robust_accuracy"] == 0.0
    assert all(v == 0.0 for v in atk.last_report["per_attack"].values()) and 0 not in calls
    assert torch.equal(adv, x)
