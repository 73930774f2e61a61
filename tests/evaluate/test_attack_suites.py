"""The adversarial suites: options and defaults, robust ≤ clean, flags, saving, AutoAttack's per-attack
accuracy, the spatial and Patch-Fool suites and the transfer matrix."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from robustvit.attacks import create_attack
from robustvit.errors import RobustvitError
from robustvit.protocols import assess
from robustvit.utils import sum_stats
from robustvit.evaluation.suites import Batch, EvalContext, create_suite
from robustvit.evaluation.suites.adversarial import chunk_seed


class SmallNet(nn.Module):
    def __init__(self, seed: int = 0, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                               nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x - 0.5) * 4


def make_ctx(model: nn.Module, tmp_path, models: dict | None = None, data: str = "test", **options) -> EvalContext:
    return EvalContext(model=model, model_name="m", models=models or {"m": model}, data_spec=data, dataset=None,
                       num_classes=10, device=torch.device("cpu"), seed=0, options=options, out_dir=tmp_path)


def make_batch(model: nn.Module, n: int = 16, seed: int = 0) -> Batch:
    x = torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = model(x).argmax(1)
    y[: n // 4] = (y[: n // 4] + 1) % 10          # a quarter misclassified: clean accuracy 0.75
    return Batch(x, y, torch.arange(n), torch.Generator().manual_seed(seed + 100))


def evaluate(spec: str, ctx: EvalContext, batches: list[Batch]) -> dict:
    suite = create_suite(spec)
    stats = {}
    for b in batches:
        for part in suite.parts(ctx):
            b.generator.manual_seed(int(b.index[0]) + 7)          # the runner seeds each unit alike
            stats.setdefault(part, []).append(suite.run(ctx, part, b))
    return suite.finalize(ctx, {p: sum_stats(v) for p, v in stats.items()})


def test_pgd_defaults_keys_and_bounds(tmp_path):
    model = SmallNet()
    res = evaluate("pgd:checks=all", make_ctx(model, tmp_path), [make_batch(model)])
    assert res["eps"] == pytest.approx(4 / 255) and res["norm"] == "linf" and res["eps_source"] == "default:imagenet"
    assert res["steps"] == 10 and res["step_size"] == pytest.approx(1 / 255)
    assert res["clean_accuracy"] == pytest.approx(0.75) and res["num_images"] == 16
    assert 0 <= res["accuracy"] <= res["clean_accuracy"]
    assert res["attack_success_rate"] == pytest.approx(1 - res["accuracy"] / res["clean_accuracy"])
    for name in ("randomized", "softmax_output", "zero_gradients", "more_steps", "blackbox_stronger"):
        assert set(res["flags"][name]) == {"flag", "detail", "message"}
    assert res["flags"]["more_steps"]["detail"]["steps"] == [10, 20]
    json.dumps(res)


def test_default_budget_follows_the_data_set_convention(tmp_path):
    """RobustBench: CIFAR-10/100 L∞ 8/255 (L2 0.5), ImageNet L∞ 4/255; --eps and suite options win."""
    model = SmallNet()
    suite = create_suite("pgd")
    settings = lambda ctx: suite.settings(ctx)  # noqa: E731
    cifar = settings(make_ctx(model, tmp_path, data="cifar10:test"))
    assert cifar["eps"] == pytest.approx(8 / 255) and cifar["eps_source"] == "default:cifar"
    l2 = settings(make_ctx(model, tmp_path, data="cifar100:test", norm="l2"))
    assert l2["eps"] == pytest.approx(0.5) and l2["norm"] == "l2"
    assert settings(make_ctx(model, tmp_path, data="imagenet:/val"))["eps"] == pytest.approx(4 / 255)
    run = settings(make_ctx(model, tmp_path, data="cifar10:test", eps="2/255"))
    assert run["eps"] == pytest.approx(2 / 255) and run["eps_source"] == "run"
    opt = create_suite("pgd:eps=1/255").settings(make_ctx(model, tmp_path, data="cifar10:test", eps="2/255"))
    assert opt["eps"] == pytest.approx(1 / 255) and opt["eps_source"] == "option"


def test_option_precedence_and_stronger_settings(tmp_path):
    model = SmallNet()
    batches = [make_batch(model, seed=s) for s in (0, 1)]
    ctx = make_ctx(model, tmp_path, eps="2/255", steps=3)
    res = evaluate("pgd:checks=0", ctx, batches)
    assert res["eps"] == pytest.approx(2 / 255) and res["steps"] == 3 and "more_steps" not in res["flags"]
    res8 = evaluate("pgd:eps=8/255:checks=0", ctx, batches)            # the suite option wins over --eps
    assert res8["eps"] == pytest.approx(8 / 255)
    assert res8["accuracy"] <= res["accuracy"]                         # a larger budget never helps the model
    strong = evaluate("pgd:eps=8/255:steps=10:checks=0", ctx, batches)
    weak = evaluate("fgsm:eps=8/255:checks=0", ctx, batches)
    assert strong["steps"] == 10 and strong["accuracy"] <= weak["accuracy"] <= weak["clean_accuracy"]
    with pytest.raises(RobustvitError, match="no option"):
        create_suite("pgd:epz=1")
    with pytest.raises(RobustvitError, match="steps=.many. is not valid .expected an integer"):
        create_suite("pgd:steps=many")


def test_results_are_replayable(tmp_path):
    model = SmallNet()
    a = evaluate("pgd:checks=0", make_ctx(model, tmp_path), [make_batch(model)])
    b = evaluate("pgd:checks=0", make_ctx(model, tmp_path), [make_batch(model)])
    assert a["accuracy"] == b["accuracy"]


def test_save_writes_images_with_rescaled_perturbation(tmp_path):
    model = SmallNet()
    batch = make_batch(model)
    res = evaluate("pgd:save=3:checks=0", make_ctx(model, tmp_path), [batch])
    folder = tmp_path / res["saved"]["dir"]
    assert res["saved"]["count"] == 3 and len(list(folder.glob("*.png"))) == 9
    clean = np.asarray(Image.open(folder / "00001_clean.png")).astype(float) / 255
    adv = np.asarray(Image.open(folder / "00001_adv.png")).astype(float) / 255
    delta = np.asarray(Image.open(folder / "00001_delta.png")).astype(float) / 255
    eps = 4 / 255
    # delta = (δ + ε) / 2ε, all three 8-bit: PNG rounding moves adv − clean by ≤ 1/255, i.e. delta by ≤ 1/8
    np.testing.assert_allclose(delta, (adv - clean + eps) / (2 * eps), atol=1 / 8 + 1 / 255)
    assert np.abs(adv - clean).max() <= eps + 1 / 255 and np.abs(adv - clean).max() >= eps - 1 / 255
    assert abs(delta.mean() - 0.5) < 0.25 and delta.std() > 0.05      # δ spans the ε-ball, centred on grey
    # the saved clean image is the data set's image
    x0 = batch.x[1].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(clean, np.round(x0 * 255) / 255, atol=1e-9)


def test_autoattack_per_attack_is_cumulative(tmp_path):
    model = SmallNet()
    res = evaluate("autoattack:steps=5:n_queries=20", make_ctx(model, tmp_path), [make_batch(model)])
    per = res["per_attack"]
    assert list(per) == ["apgd_ce", "apgd_t", "fab_t", "square"] and res["attacks"] == list(per)
    vals = list(per.values())
    assert all(b <= a + 1e-9 for a, b in zip(vals, vals[1:])) and vals[-1] == pytest.approx(res["accuracy"])
    assert res["reduced"] is True and res["overrides"] == {"steps": 5, "n_queries": 20}
    assert {"blackbox_stronger", "n_classes", "zero_gradients"} <= set(res["flags"])


def test_spatial_suite_reports_grid_and_throughput(tmp_path):
    model = SmallNet()
    res = evaluate("spatial:translations=3:rotations=5", make_ctx(model, tmp_path), [make_batch(model)])
    assert res["grid"] == "3x3x5" and res["transforms"] == 45 and res["reduced_grid"] is True
    # a plain module is taken at 224 px: Bhojanapalli et al.'s ±16 px at 384 px, scaled
    assert res["max_translation"] == pytest.approx(16 * 224 / 384)
    assert res["translation_convention"].startswith("Bhojanapalli")
    assert res["transforms_per_s"] > 0 and res["accuracy"] <= res["clean_accuracy"]
    assert "eps" not in res


def test_patch_fool_suite_skips_cnns_and_runs_on_vits(tmp_path, tiny_vit16):
    cnn = SmallNet()
    ctx = make_ctx(cnn, tmp_path)
    suite = create_suite("patch_fool")
    assert suite.parts(ctx) == []
    assert "skipped" in suite.finalize(ctx, {})
    batch = make_batch(tiny_vit16)
    res = evaluate("patch_fool:steps=3:checks=0", make_ctx(tiny_vit16, tmp_path), [batch])
    assert res["attack"] == "patch_fool" and res["eps"] is None and res["scoring"] == "final"
    # the reference's scoring: the final iterate of every image, misclassified ones included
    seed = chunk_seed(Batch(batch.x, batch.y, batch.index, torch.Generator().manual_seed(7)))   # as evaluate()
    atk = create_attack("patch_fool", tiny_vit16, steps=3, seed=seed)
    with torch.no_grad():
        expected = (tiny_vit16(atk(batch.x, batch.y)).argmax(1) == batch.y).float().mean().item()
    assert res["accuracy"] == pytest.approx(expected)
    best = evaluate("patch_fool:steps=3:checks=0:scoring=best", make_ctx(tiny_vit16, tmp_path), [make_batch(tiny_vit16)])
    assert best["scoring"] == "best" and best["accuracy"] <= best["clean_accuracy"]


def test_transfer_matrix_column_and_white_box_diagonal(tmp_path):
    a, b = SmallNet(0), SmallNet(1)
    models = {"a": a, "b": b}
    batch = make_batch(a)
    suite = create_suite("transfer:eps=8/255")
    cols = {}
    for name, target in models.items():
        ctx = make_ctx(target, tmp_path, models=models)
        ctx.model_name = name
        stats = {}
        for part in suite.parts(ctx):
            batch.generator.manual_seed(hash(part) % 1000)
            stats[part] = suite.run(ctx, part, batch)
        cols[name] = suite.finalize(ctx, stats)
    assert set(cols["a"]["matrix"]) == {"a", "b"} and set(cols["a"]["matrix"]["a"]) == {"a"}
    # The diagonal: white-box PGD on the target itself, with the unit's seed.
    batch.generator.manual_seed(hash("a") % 1000)
    atk = create_attack("pgd", a, eps=8 / 255, steps=10, step_size=2 / 255, seed=chunk_seed(batch))
    with torch.no_grad():
        ok = (a(batch.x).argmax(1) == batch.y) & (a(atk(batch.x, batch.y)).argmax(1) == batch.y)
    assert cols["a"]["accuracy"]["a"] == pytest.approx(ok.float().mean().item())
    assert cols["a"]["accuracy"]["a"] <= cols["a"]["accuracy"]["b"] + 0.25   # white-box is the stronger one
    assert len(suite._cache) == 2                                            # crafted once per source


def test_report_sections_curve_examples_and_transfer(tmp_path):
    from robustvit.report import write_report

    results = []
    for name, seed in (("vit", 0), ("cnn", 1)):
        model = SmallNet(seed)
        out = tmp_path / name
        ctx = make_ctx(model, out)
        batch = make_batch(model)
        suites = {spec: evaluate(spec, ctx, [batch]) for spec in
                  ("fgsm:checks=0", "pgd:eps=1/255:checks=0", "pgd:eps=4/255:save=2:checks=0", "spatial:translations=3:rotations=3")}
        suites["transfer"] = {"attack": "pgd", "eps": 4 / 255, "accuracy": {"vit": 0.1, "cnn": 0.5}, "clean_accuracy": 0.75}
        results.append({"model": {"name": name, "params": 1, "spec": {"family": "x", "input_size": [3, 16, 16]}},
                        "data": {"spec": "test", "num_images": 16}, "run": {"device": "cpu"}, "suites": suites,
                        "_dir": str(out)})
    md_path, html_path = write_report(results, tmp_path / "report")
    md = md_path.read_text()
    assert md.count("## Adversarial robustness: FGSM / PGD") == 1            # the family is rendered once
    assert "adversarial_accuracy_vs_eps.png" in md and "adversarial_examples.png" in md
    assert (tmp_path / "report" / "figures" / "adversarial_examples.png").is_file()
    assert "| crafted on vit | 0.1000 | 0.1000 |" in md and "grid 3x3x3 instead of 9x9x31" in md
    assert "<img src='data:image/png;base64," in html_path.read_text()


def _transfer_column(suite, target, tmp_path, models):
    ctx = make_ctx(target, tmp_path, models=models)
    batch = make_batch(target)
    stats = {}
    for part in suite.parts(ctx):
        batch.generator.manual_seed(7)
        stats[part] = suite.run(ctx, part, batch)
    return suite.finalize(ctx, stats), batch


def _micro(seed: int):
    from robustvit.models import create_model

    torch.manual_seed(seed)
    return create_model("vit_cifar_micro", num_classes=10, embed_dim=32, depth=1, num_heads=2, img_size=16).eval()


def test_transfer_source_by_bare_name_is_refused_unless_random_is_allowed(tmp_path):
    target = _micro(0)
    target.weights = {"pretrained": True, "source": "file:x"}
    models = {"m": target}
    with pytest.raises(RobustvitError, match="random weights; pass source_pretrained=1") as e:
        create_suite("transfer:sources=vit_cifar_micro").parts(make_ctx(target, tmp_path, models=models))
    assert "\n" not in str(e.value) and "allow_random=1" in str(e.value) and "source_weights=FILE" in str(e.value)
    suite = create_suite("transfer:eps=8/255:steps=2:sources=resnet_cifar18:allow_random=1")
    res, _ = _transfer_column(suite, target, tmp_path, models)
    assert set(res["accuracy"]) == {"m", "resnet_cifar18"}
    dev = assess("transfer", res, {})["deviations"]          # the protocols module decides from the recorded fact
    assert res["random_sources"] == ["resnet_cifar18"] and "random weights: resnet_cifar18" in dev[0]
    assert res["sources"]["resnet_cifar18"]["source"] == "random" and res["sources"]["resnet_cifar18"]["allow_random"]
    assert res["sources"]["m"]["source"] == "file:x"


def test_transfer_source_from_a_checkpoint_is_comparable_and_matches_white_box(tmp_path):
    from robustvit.models import save_checkpoint

    source, target = _micro(1), _micro(0)
    target.weights = {"pretrained": True, "source": "file:x"}
    save_checkpoint(source, tmp_path / "src")
    suite = create_suite(f"transfer:eps=8/255:steps=3:sources={tmp_path / 'src'}")
    res, batch = _transfer_column(suite, target, tmp_path, {"m": target})
    key = str(tmp_path / "src")
    assert res["random_sources"] == [] and assess("transfer", res, {})["comparable"] is True
    assert res["sources"][key]["source"] == f"checkpoint:{key}" and len(res["sources"][key]["sha256"]) == 64
    # the column entry: PGD crafted on the reloaded source (same weights, same seed), scored on the target
    batch.generator.manual_seed(7)
    atk = create_attack("pgd", source, eps=8 / 255, steps=3, seed=chunk_seed(batch))
    with torch.no_grad():
        ok = (target(batch.x).argmax(1) == batch.y) & (target(atk(batch.x, batch.y)).argmax(1) == batch.y)
    assert res["accuracy"][key] == pytest.approx(ok.float().mean().item())


def test_transfer_random_target_is_labelled_and_source_size_checked(tmp_path):
    target = _micro(0)                                  # create_model without weights: random
    res, _ = _transfer_column(create_suite("transfer:eps=8/255:steps=1"), target, tmp_path, {"m": target})
    assert res["random_sources"] == ["m"] and "random weights: m" in assess("transfer", res, {})["deviations"][0]
    with pytest.raises(RobustvitError, match="takes 32px images"):
        create_suite("transfer:sources=vit_cifar_micro:allow_random=1").parts(
            make_ctx(target, tmp_path, models={"m": target}))
    with pytest.raises(RobustvitError, match="one source"):
        create_suite("transfer:sources=a+b:source_weights=w.safetensors").parts(
            make_ctx(target, tmp_path, models={"m": target}))


def test_autoattack_individual_mode_beside_the_cascade(tmp_path):
    """#36: individual=1 runs every member alone on all clean-correct points (as the original's
    run_standard_evaluation_individual): each is at least the cascade's accuracy, the first equals its cascade
    value (same seed, same points), and the cascade is unchanged by it."""
    model = SmallNet()
    batches = [make_batch(model, seed=s) for s in (0, 1)]
    batches[1].index += 16                          # two chunks of one run
    spec = "autoattack:version=custom:attacks=apgd_ce+fab_t+square:steps=3:n_queries=20:n_target_classes=2:checks=0"
    cascade = evaluate(spec, make_ctx(model, tmp_path), batches)
    both = evaluate(spec + ":individual=1", make_ctx(model, tmp_path), batches)
    ind, per = both["individual"], both["per_attack"]
    assert list(ind) == ["apgd_ce", "fab_t", "square"] and per == cascade["per_attack"]
    assert both["accuracy"] == cascade["accuracy"] < both["clean_accuracy"]
    assert ind["apgd_ce"] == per["apgd_ce"]
    assert all(both["accuracy"] <= a <= both["clean_accuracy"] for a in ind.values())
    assert ind["square"] > both["accuracy"]          # alone, the weak black-box member breaks fewer points


def test_save_all_writes_every_example_with_its_index_and_resumes(tmp_path):
    """#36: save=all puts every adversarial example (the clean image where none was attacked) and its image index
    into one safetensors file; it reloads bit-exact against the attack run by hand, and its recount is the suite's
    accuracy. Each unit writes its own file, so finalising again (a resumed run) rebuilds the same file."""
    from safetensors.torch import load_file

    model = SmallNet()
    batches = [make_batch(model, n=8, seed=s) for s in (0, 1)]
    batches[1].index += 8
    suite = create_suite("pgd:eps=8/255:steps=3:save=all:checks=0")
    ctx = make_ctx(model, tmp_path)
    stats = []
    for b in reversed(batches):                                   # units finish in any order
        b.generator.manual_seed(int(b.index[0]) + 7)
        stats.append(suite.run(ctx, "all", b))
    res = suite.finalize(ctx, {"all": sum_stats(stats)})
    path = tmp_path / res["saved"]["file"]
    saved = load_file(str(path))
    assert res["saved"]["count"] == 16 and saved["x_adv"].shape == (16, 3, 16, 16) and saved["x_adv"].dtype == torch.float32
    assert saved["indices"].tolist() == list(range(16))
    for b in batches:
        b.generator.manual_seed(int(b.index[0]) + 7)
        atk = create_attack("pgd", model, eps=8 / 255, steps=3, seed=chunk_seed(b))
        with torch.no_grad():
            ok = model(b.x).argmax(1) == b.y
        expected = b.x.clone()
        expected[ok] = atk(b.x[ok], b.y[ok])
        assert torch.equal(saved["x_adv"][b.index], expected)
    with torch.no_grad():
        x = torch.cat([b.x for b in batches])
        y = torch.cat([b.y for b in batches])
        robust = (model(x).argmax(1) == y) & (model(saved["x_adv"]).argmax(1) == y)
    assert res["accuracy"] == pytest.approx(robust.float().mean().item())
    first = path.read_bytes()
    path.unlink()
    assert suite.finalize(ctx, {"all": sum_stats(stats)})["saved"]["count"] == 16 and path.read_bytes() == first
