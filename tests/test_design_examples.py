"""docs/design.md's code, as written: the convention's example (its printed output is the text block that
follows it) and the five "how to add" examples (attack, corruption, suite, loss, analysis). Each example is
executed, registers into the real registry, is exercised the way the text says, and is unregistered after."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def python_block(title: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", section(title), re.S)
    assert len(blocks) == 1, f"{title}: expected one python block, found {len(blocks)}"
    return blocks[0]


def run_block(title: str) -> tuple[dict, str]:
    """Execute the section's python block in a fresh namespace; (namespace, what it printed)."""
    scope: dict = {"__name__": f"design_example_{len(title)}"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_block(title), f"docs/design.md: {title}", "exec", dont_inherit=True), scope)
    return scope, out.getvalue()


@contextlib.contextmanager
def restored(registry):
    """Put ``registry`` back as it was (names and aliases) after the block."""
    registry.list()                                  # load the built-ins first
    items, aliases = dict(registry._items), dict(registry._aliases)
    try:
        yield registry
    finally:
        registry._items.clear(), registry._items.update(items)
        registry._aliases.clear(), registry._aliases.update(aliases)


def _tiny_vit():
    from robustvit.models import create_model

    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=5).eval()
    with torch.no_grad():
        m.net.head.weight.normal_(0, 1.0)           # a non-trivial head: the predictions differ per image
    return m


def _images(n: int = 8, size: int = 16):
    from robustvit.data import create_dataset

    return create_dataset(f"synthshapes:test,size={size},count={n},classes=5,seed=1")


def test_every_python_block_is_covered():
    text = DESIGN.read_text()
    titles = ["One convention for everything registered", "How to add an attack", "How to add a corruption",
              "How to add an evaluation suite", "How to add a training loss", "How to add an analysis"]
    assert len(re.findall(r"```python\n", text)) == len(titles)
    for t in titles:
        python_block(t)


def test_the_convention_example_prints_what_the_doc_shows():
    scope, printed = run_block("One convention for everything registered")
    shown = re.search(r"prints\n```text\n(.*?)```", section("One convention for everything registered"), re.S).group(1)
    assert printed == shown
    reg = scope["WIDGETS"]
    assert reg.get("blue-widget") is scope["BlueWidget"] and reg.list() == ["blue_widget"]


def test_attack_example():
    from robustvit.attacks import create_attack, list_attacks
    from robustvit.attacks.base import ATTACKS
    from robustvit.evaluate.suites.base import SUITES

    SUITES.list()                                   # the built-in suites first: the example's is removed after
    with restored(ATTACKS):
        run_block("How to add an attack")
        assert "my_ifgsm" in list_attacks("my*")
        model = _tiny_vit()
        x, y = _images().get_batch(torch.arange(8))
        y = torch.as_tensor(y)
        atk = create_attack("my-ifgsm", model, eps=8 / 255, steps=5, seed=0)
        assert type(atk) is ATTACKS.get("my_ifgsm")
        adv = atk(x, y)
        assert adv.shape == x.shape and float(adv.min()) >= 0 and float(adv.max()) <= 1
        assert float((adv - x).abs().max()) <= 8 / 255 + 1e-6                      # inside the ε-ball
        with torch.no_grad():
            ce = torch.nn.functional.cross_entropy
            assert float(ce(model(adv), y)) > float(ce(model(x), y))                # it ascends the loss
        assert all(p.grad is None for p in model.parameters()) and not model.training
        # …and it runs from eval by its name, with its own options (a file in robustvit/attacks/ is imported with
        # the package; a class registered later, as here, is picked up by register_attack_suites)
        from robustvit.evaluate.suites import Batch, EvalContext, create_suite
        from robustvit.evaluate.suites.adversarial import register_attack_suites

        with restored(SUITES):
            register_attack_suites()
            assert "my_ifgsm" in SUITES.list() and "my-ifgsm" in SUITES
            suite = create_suite("my-ifgsm:steps=3:checks=0")
            ctx = EvalContext(model=model, model_name="m", models={"m": model}, data_spec="synthshapes:test",
                              dataset=None, num_classes=5, device=torch.device("cpu"), seed=0, options={"eps": "8/255"})
            res = suite.finalize(ctx, {"all": suite.run(ctx, "all", Batch(x, y, torch.arange(8), torch.Generator()))})
            assert res["attack"] == "my_ifgsm" and res["steps"] == 3 and res["eps"] == 8 / 255
            assert res["eps_source"] == "run" and 0 <= res["accuracy"] <= res["clean_accuracy"]
    assert "my_ifgsm" not in list_attacks() and "my_ifgsm" not in SUITES.list()


def test_corruption_example():
    from robustvit.corruptions import CORRUPTIONS, corrupt, list_corruptions

    with restored(CORRUPTIONS):
        scope, _ = run_block("How to add a corruption")
        y = scope["y"]
        assert y.shape == (4, 3, 64, 64) and 0 <= float(y.min()) and float(y.max()) <= 1
        assert "vignette" in list_corruptions("extra")
        x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        a, b = corrupt(x, "vignette", 5, seed=1), corrupt(x, "vignette", 5, seed=1)
        assert torch.equal(a, b) and not torch.equal(a, x) and bool((a <= x + 1e-7).all())   # darkens only
    assert "vignette" not in list_corruptions()


def test_suite_example():
    from robustvit.evaluate.suites import Batch, EvalContext, create_suite, list_suites
    from robustvit.evaluate.suites.base import SUITES

    with restored(SUITES):
        run_block("How to add an evaluation suite")
        assert "greyscale" in list_suites()
        model = _tiny_vit()
        x, y = _images().get_batch(torch.arange(8))
        y = torch.as_tensor(y)
        suite = create_suite("greyscale:limit=8")
        assert suite.max_images == 8
        ctx = EvalContext(model=model, model_name="vit", models={"vit": model}, data_spec="synthshapes:test",
                          dataset=None, num_classes=5, device=torch.device("cpu"), seed=0, options={}, out_dir=None)
        halves = [suite.run(ctx, "all", Batch(x[i:i + 4], y[i:i + 4], torch.arange(i, i + 4),
                                             torch.Generator().manual_seed(0))) for i in (0, 4)]
        stats = {"all": {k: sum(h[k] for h in halves) for k in halves[0]}}
        res = suite.finalize(ctx, stats)
        with torch.no_grad():
            expected = (model(x.mean(1, keepdim=True).expand_as(x)).argmax(1) == y).float().mean().item()
        assert res["top1"] == pytest.approx(expected) and res["num_images"] == 8
    assert "greyscale" not in list_suites()


def test_loss_example():
    from robustvit.training import losses

    if not hasattr(losses.TrainingLoss, "Options"):
        pytest.skip("robustvit.training.losses declares no typed Options (the losses package is not merged here)")
    from robustvit.training.losses import LOSSES, create_loss, list_losses

    with restored(LOSSES):
        run_block("How to add a training loss")
        assert "logit_squeeze" in list_losses()
        loss_fn = create_loss("logit-squeeze", weight="0.1")
        assert loss_fn.options.weight == pytest.approx(0.1)
        model = _tiny_vit().train()
        x, y = _images().get_batch(torch.arange(8))
        y = torch.as_tensor(y)
        loss, clean, adv = loss_fn(model, x, y, epoch=0)
        with torch.no_grad():
            logits = model(x)
            expected = torch.nn.functional.cross_entropy(logits, y) + 0.1 * logits.pow(2).mean()
        assert adv is None and torch.allclose(clean, logits) and float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
        loss.backward()
        assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters()
                   if p.requires_grad)
        with pytest.raises(Exception, match="weight"):
            create_loss("logit_squeeze", weight="-1")
    assert "logit_squeeze" not in list_losses()


def test_analysis_example(tmp_path):
    import json

    from robustvit.analysis import ANALYSES, list_analyses, run_analyses

    with restored(ANALYSES):
        run_block("How to add an analysis")
        assert "token_norms" in list_analyses()
        model = _tiny_vit()
        data = _images()
        res = run_analyses(model, data, ["token-norms:images=6"], tmp_path, batch_size=4, device="cpu")
        r = res["token_norms"]
        # independently: the tokens after each of the model's own blocks (forward hooks), first 6 images
        outs: list[torch.Tensor] = []
        hooks = [b.register_forward_hook(lambda m, a, o: outs.append(o)) for b in model.net.blocks]
        x, _ = data.get_batch(torch.arange(6))
        with torch.no_grad():
            model(x)
        for h in hooks:
            h.remove()
        expected = [float(t.norm(dim=-1).mean(1).mean()) for t in outs]
        assert r["norm"] == pytest.approx(expected, rel=1e-5)
        assert r["options"] == {"images": 6}
        assert json.loads((tmp_path / "token_norms.json").read_text())["norm"] == pytest.approx(expected, rel=1e-5)
        from robustvit.errors import RobustvitError

        with pytest.raises(RobustvitError, match="does not apply to cnn"):
            from robustvit.models import create_model

            run_analyses(create_model("resnet_cifar18", width_mult=0.0625, num_classes=5), data, ["token_norms"], None)
    assert "token_norms" not in list_analyses()
