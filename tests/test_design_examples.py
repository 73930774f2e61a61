"""docs/design.md's code, as written: the convention's example (its printed output is the text block that
follows it) and the six "how to add" examples (attack, corruption, suite, loss, analysis, data source).

Each "how to add" is one new file, named in the text above its code. The test writes it into its package (a
temporary folder appended to the package's ``__path__``, so that the module is ``robustvit.<package>.<name>``),
lets the registry load its package again — no list is edited — and uses it as the text says, from the command
line where the text says so; afterwards the module, the folder and the registered names are removed."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import sys
from pathlib import Path

import pytest
import torch

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
DATA = "synthshapes:test,size=16,count=8,classes=5,seed=1"
HOW_TO = ["How to add an attack", "How to add a corruption", "How to add an evaluation suite",
          "How to add a training loss", "How to add an analysis", "How to add a data source"]


def section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def python_block(title: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", section(title), re.S)
    assert len(blocks) == 1, f"{title}: expected one python block, found {len(blocks)}"
    return blocks[0]


def new_file(title: str) -> tuple[str, str]:
    """(path named above the block, the block's code) of a "how to add" section."""
    m = re.search(r"`(src/robustvit/[\w/]+\.py)`:\n```python\n(.*?)```", section(title), re.S)
    assert m, f"{title}: the code block is not introduced by the file it goes in (`src/robustvit/…/name.py`:)"
    return m.group(1), m.group(2)


@contextlib.contextmanager
def installed(title: str, registry, tmp_path: Path):
    """The section's file written into its package; ``registry`` loads its package again on the next lookup."""
    path, code = new_file(title)
    rel = Path(path).relative_to("src")
    package, module = ".".join(rel.parent.parts), ".".join(rel.with_suffix("").parts)
    pkg = importlib.import_module(package)
    registry.list()                                   # the built-ins, loaded before
    items, aliases, search = dict(registry._items), dict(registry._aliases), list(pkg.__path__)
    folder = tmp_path / "plugin" / rel.parent
    folder.mkdir(parents=True)
    (folder / rel.name).write_text(code)
    pkg.__path__.append(str(folder))
    importlib.invalidate_caches()
    registry._loaded = False
    try:
        yield
    finally:
        pkg.__path__[:] = search
        sys.modules.pop(module, None)
        pkg.__dict__.pop(rel.stem, None)
        registry._items.clear(), registry._items.update(items)
        registry._aliases.clear(), registry._aliases.update(aliases)
        registry._loaded = True


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


def cli(*argv: str) -> None:
    from robustvit.cli import main

    assert main([*argv, "--device", "cpu"]) == 0


def checkpoint(folder: Path, classes: int = 5) -> str:
    """A tiny ViT (16 px, non-trivial head) saved as a checkpoint folder, for the command line."""
    from robustvit.models import create_model, save_checkpoint

    torch.manual_seed(0)
    m = create_model("vit_cifar_tiny", embed_dim=32, depth=2, num_heads=2, img_size=16, num_classes=classes).eval()
    with torch.no_grad():
        m.net.head.weight.normal_(0, 1.0)           # a non-trivial head: the predictions differ per image
    save_checkpoint(m, folder)
    return str(folder)


def load(ckpt: str):
    from robustvit.models import create_model

    return create_model(ckpt).eval()


def images(spec: str = DATA) -> tuple[torch.Tensor, torch.Tensor]:
    from robustvit.data import create_dataset

    ds = create_dataset(spec)
    x, y = ds.get_batch(torch.arange(len(ds)))
    return x.float() / 255 if x.dtype == torch.uint8 else x, torch.as_tensor(y)


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_every_python_block_is_covered():
    text = DESIGN.read_text()
    assert len(re.findall(r"```python\n", text)) == len(HOW_TO) + 1
    python_block("One convention for everything registered")
    for t in HOW_TO:
        path, _ = new_file(t)
        assert not (DESIGN.parents[1] / path).exists(), f"{path} exists: the example must be a new file"


def test_the_convention_example_prints_what_the_doc_shows():
    scope: dict = {"__name__": "design_example_convention"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_block("One convention for everything registered"), "docs/design.md", "exec",
                     dont_inherit=True), scope)
    shown = re.search(r"prints\n```text\n(.*?)```", section("One convention for everything registered"), re.S).group(1)
    assert out.getvalue() == shown
    reg = scope["WIDGETS"]
    assert reg.get("blue-widget") is scope["BlueWidget"] and reg.list() == ["blue_widget"]


def test_attack_example(tmp_path):
    from robustvit.attacks import create_attack, list_attacks
    from robustvit.attacks.base import ATTACKS
    from robustvit.evaluation.suites.base import SUITES

    SUITES.list()                                   # the built-in suites first: the example's is removed after
    with installed("How to add an attack", ATTACKS, tmp_path):
        assert "my_ifgsm" in list_attacks("my*")
        model = load(checkpoint(tmp_path / "ckpt"))
        x, y = images()
        atk = create_attack("my-ifgsm", model, eps=8 / 255, steps=5, seed=0)
        assert type(atk) is ATTACKS.get("my_ifgsm") and type(atk).__module__ == "robustvit.attacks.my_ifgsm"
        adv = atk(x, y)
        assert adv.shape == x.shape and float(adv.min()) >= 0 and float(adv.max()) <= 1
        assert float((adv - x).abs().max()) <= 8 / 255 + 1e-6                      # inside the ε-ball
        with torch.no_grad():
            ce = torch.nn.functional.cross_entropy
            assert float(ce(model(adv), y)) > float(ce(model(x), y))                # it ascends the loss
        assert all(p.grad is None for p in model.parameters()) and not model.training
        # …and it runs from eval by its name, with its own options (a file in robustvit/attacks/ is imported with
        # the package; a class registered later, as here, is picked up by register_attack_suites)
        from robustvit.evaluation.suites import Batch, EvalContext, create_suite
        from robustvit.evaluation.suites.adversarial import register_attack_suites

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


def test_attack_example_runs_from_robustvit_eval(tmp_path):
    from robustvit.attacks.base import ATTACKS
    from robustvit.evaluation.suites.base import SUITES

    SUITES.list()
    with installed("How to add an attack", ATTACKS, tmp_path), restored(SUITES):
        ckpt = checkpoint(tmp_path / "ckpt")
        cli("eval", "--model", ckpt, "--data", DATA, "--suite", "clean,my_ifgsm:eps=8/255:steps=2",
            "--out", str(tmp_path / "run"))
        suites = results(tmp_path / "run")["suites"]
        key = next(k for k in suites if k.startswith("my_ifgsm"))
        assert suites[key]["accuracy"] <= suites["clean"]["top1"]


def test_corruption_example(tmp_path):
    from robustvit.corruptions import CORRUPTIONS, corrupt, list_corruptions
    from robustvit.corruptions.params import parse_corruptions

    with installed("How to add a corruption", CORRUPTIONS, tmp_path):
        assert "vignette" in list_corruptions("extra") and "vignette" in parse_corruptions("all")
        x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        a, b = corrupt(x, "vignette", 5, seed=1), corrupt(x, "vignette", 5, seed=1)
        assert torch.equal(a, b) and not torch.equal(a, x) and bool((a <= x + 1e-7).all())   # darkens only
        cli("eval", "--model", checkpoint(tmp_path / "ckpt"), "--data", DATA, "--suite",
            "corruptions:corruptions=vignette:severities=5", "--out", str(tmp_path / "run"))
        res = next(v for k, v in results(tmp_path / "run")["suites"].items() if k.startswith("corruptions"))
        assert list(res["accuracy"]) == ["vignette"] and 0 <= res["mean_accuracy_all"] <= 1
    assert "vignette" not in list_corruptions() and "vignette" not in parse_corruptions("all")


def test_suite_example(tmp_path):
    from robustvit.evaluation.suites import list_suites
    from robustvit.evaluation.suites.base import SUITES

    with installed("How to add an evaluation suite", SUITES, tmp_path):
        ckpt = checkpoint(tmp_path / "ckpt")
        cli("eval", "--model", ckpt, "--data", DATA, "--suite", "greyscale", "--out", str(tmp_path / "run"),
            "--batch-size", "3")                                               # chunks summed by key
        res = results(tmp_path / "run")["suites"]["greyscale"]
        x, y = images()
        with torch.no_grad():
            expected = (load(ckpt)(x.mean(1, keepdim=True).expand_as(x)).argmax(1) == y).float().mean().item()
        assert res["top1"] == pytest.approx(expected) and res["num_images"] == 8
    assert "greyscale" not in list_suites()


def test_loss_example(tmp_path):
    from robustvit.training import losses

    if not hasattr(losses.TrainingLoss, "Options"):
        pytest.skip("robustvit.training.losses declares no typed Options (the losses package is not merged here)")
    from robustvit.training.losses import LOSSES, create_loss, list_losses

    with installed("How to add a training loss", LOSSES, tmp_path):
        assert "logit_squeeze" in list_losses()
        loss_fn = create_loss("logit-squeeze", weight="0.1")
        assert loss_fn.options.weight == pytest.approx(0.1)
        model = load(checkpoint(tmp_path / "ckpt")).train()
        x, y = images()
        loss, clean, adv = loss_fn(model, x, y, epoch=0)
        with torch.no_grad():
            logits = model(x)
            expected = torch.nn.functional.cross_entropy(logits, y) + 0.1 * logits.pow(2).mean()
        assert adv is None and torch.allclose(clean, logits) and float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
        with pytest.raises(Exception, match="weight"):
            create_loss("logit_squeeze", weight="-1")
        cli("train", "--model", "vit_cifar_micro", "--data", "synthshapes:train,count=8", "--epochs", "1",
            "--batch-size", "8", "--loss", "logit_squeeze", "--loss-option", "weight=0.1", "--out", str(tmp_path / "run"))
        assert "logit_squeeze" in (tmp_path / "run" / "results.json").read_text()
    assert "logit_squeeze" not in list_losses()


def test_analysis_example(tmp_path):
    from robustvit.analysis import ANALYSES, list_analyses

    with installed("How to add an analysis", ANALYSES, tmp_path):
        ckpt = checkpoint(tmp_path / "ckpt")
        cli("analyze", "token_norms:images=6", "--model", ckpt, "--data", DATA, "--out", str(tmp_path / "run"),
            "--batch-size", "4")
        r = json.loads((tmp_path / "run" / "token_norms.json").read_text())
        # independently: the tokens after each of the model's own blocks (forward hooks), first 6 images
        model = load(ckpt)
        outs: list[torch.Tensor] = []
        hooks = [b.register_forward_hook(lambda m, a, o: outs.append(o)) for b in model.net.blocks]
        with torch.no_grad():
            model(images()[0][:6])
        for h in hooks:
            h.remove()
        assert r["norm"] == pytest.approx([float(t.norm(dim=-1).mean(1).mean()) for t in outs], rel=1e-5)
        assert r["options"] == {"images": 6}
        from robustvit.cli import main

        assert main(["analyze", "token_norms", "--model", "resnet_cifar18", "--data", DATA,
                     "--out", str(tmp_path / "cnn")]) == 2                      # a family it does not claim
    assert "token_norms" not in list_analyses()


def test_data_source_example(tmp_path):
    from robustvit.data import SOURCES, create_dataset, list_sources
    from robustvit.errors import RobustvitError

    with installed("How to add a data source", SOURCES, tmp_path):
        x, y = images("stripes:test:count=16:size=16")
        assert x.shape == (16, 3, 16, 16) and 0 <= float(x.min()) and float(x.max()) <= 1
        horizontal = (x[:, 0].diff(dim=2).abs().sum((1, 2)) < 1e-4)            # constant along each row
        assert torch.equal(horizontal, y == 0) and 0 < int(y.sum()) < 16
        with pytest.raises(RobustvitError, match="did you mean count"):
            create_dataset("stripes:test:cuont=3")
        ckpt = checkpoint(tmp_path / "ckpt", classes=2)
        cli("eval", "--model", ckpt, "--data", "stripes:test:count=16:size=16", "--suite", "clean",
            "--out", str(tmp_path / "run"))
        with torch.no_grad():
            expected = (load(ckpt)(x).argmax(1) == y).float().mean().item()
        assert results(tmp_path / "run")["suites"]["clean"]["top1"] == pytest.approx(expected)
    assert "stripes" not in list_sources()
