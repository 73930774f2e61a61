"""Contract tests over the whole analysis registry (issue 22): every registered analysis, on every model
family it claims among a tiny ViT, a tiny CNN and a FAN stand-in (seeded, non-trivial heads, synthshapes
images), runs through ``run_analyses``; its documented invariants hold; its result is JSON-serialisable and
records its options; on a family it does not claim it refuses in one line naming what applies. Its options
are a dataclass whose bounds refuse bad values in one line, and its plain function takes the same options."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import math
from pathlib import Path

import pytest
import torch

import robustvit.analysis as analysis
from robustvit.analysis import ANALYSES, get_analysis, list_analyses, run_analyses
from robustvit.errors import RobustvitError
from robustvit.models.families import FAMILIES, family_of
from robustvit.options import options_dict

#: Tiny options per analysis (the contract is about behaviour, not the paper's sample sizes).
TINY = {"lesion": {"samples": 2}, "attention_stability": {"masks": 2, "images": 2},
        "grouping": {"images": 1, "clusters": 2}, "attention_maps": {"images": 2},
        "perturbation_semantics": {"steps": 1, "classes": 2, "vis_steps": 1}}
NAMES = list_analyses()
MODELS = ("vit", "cnn", "fan")


def _head(layer: torch.nn.Linear, seed: int) -> None:
    """Non-trivial classifier weights (timm's tiny head init makes a random network nearly constant)."""
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=torch.Generator().manual_seed(seed)))


def _build(kind: str) -> torch.nn.Module:
    from robustvit.models import create_model

    torch.manual_seed(0)
    if kind == "vit":
        m = create_model("vit_cifar_tiny", embed_dim=32, depth=3, num_heads=2, img_size=16, num_classes=5)
        _head(m.net.head, 1)
    elif kind == "cnn":
        m = create_model("resnet_cifar18", width_mult=0.0625, num_classes=5)
        _head(m.net.fc, 2)
    else:
        m = _standins().stand_in_fan()                 # FAN-style blocks whose attention takes a mask
        _head(m.net.head, 3)
    return m.eval()


def _standins():
    spec = importlib.util.spec_from_file_location("robustvit_test_standins", Path(__file__).with_name("standins.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def zoo():
    """kind → (model, synthshapes images at the model's input size)."""
    from robustvit.data import create_dataset

    out = {}
    for kind in MODELS:
        m = _build(kind)
        size = m.spec.input_size[-1]
        out[kind] = (m, create_dataset(f"synthshapes:test,size={size},count=8,classes=5,seed=3"))
    return out


@pytest.fixture(scope="module")
def results(zoo, tmp_path_factory):
    """(analysis, kind) → (result, the folder it was written to); computed once, lazily."""
    cache: dict[tuple[str, str], tuple[dict, object]] = {}

    def get(name: str, kind: str):
        if (name, kind) not in cache:
            model, data = zoo[kind]
            out = tmp_path_factory.mktemp(f"{name}-{kind}")
            spec = ":".join([name] + [f"{k}={v}" for k, v in TINY.get(name, {}).items()])
            res = run_analyses(model, data, [spec], out, batch_size=4, seed=0, device="cpu")[name]
            cache[(name, kind)] = (res, out)
        return cache[(name, kind)]
    return get


def _clean_accuracy(model, data) -> float:
    x, y = data.get_batch(torch.arange(len(data)))
    with torch.no_grad():
        return (model(x).argmax(1) == torch.as_tensor(y)).float().mean().item()


def _unit(values) -> bool:
    flat = torch.tensor(values, dtype=torch.float64).flatten()
    return bool(((flat >= 0) & (flat <= 1)).all())


def _square(m, *, lo: float) -> torch.Tensor:
    t = torch.tensor(m, dtype=torch.float64)
    assert t.ndim == 2 and t.shape[0] == t.shape[1]
    assert torch.allclose(t, t.T, atol=1e-6) and torch.allclose(t.diagonal(), torch.ones(len(t), dtype=t.dtype), atol=1e-6)
    assert float(t.min()) >= lo - 1e-9 and float(t.max()) <= 1 + 1e-9
    return t


# -- the documented invariants, one checker per analysis -------------------------------------------------
def check_correlation(r, model, data, kind):
    n = 4 if kind == "cnn" else 3                     # CNN: one representation per stage by default
    for key in ("all_tokens", "cls_token"):
        assert _square(r[key], lo=0.0).shape == (n, n)
    assert r["method"] == ("cka" if kind == "cnn" else "pearson") and len(r["layers"]) == n


def check_lesion(r, model, data, kind):
    clean = _clean_accuracy(model, data)
    assert r["clean_accuracy"] == pytest.approx(clean)          # nothing removed = the model itself
    L = r["num_blocks"]
    assert len(r["single"]["block"]) == L and _unit(r["single"]["block"])
    for key in ("random", "random_attention", "random_mlp"):
        for n, s in r.get(key, {}).items():
            assert s["min"] <= s["mean"] <= s["max"] and 0 <= s["min"] and s["max"] <= 1
            assert s["samples"] == 2 and all(len(b) == int(n) and 0 not in b for b in s["blocks"])


def check_restricted_attention(r, model, data, kind):
    clean = _clean_accuracy(model, data)
    assert r["clean_accuracy"] == pytest.approx(clean)
    G = max(r["grid"])
    assert r["local"][str(G - 1)] == r["clean_accuracy"] == r["random"][str(G - 1)]   # nothing masked
    assert r["masked_pairs"][str(G - 1)] == 0
    assert r["cls_only_first"]["0"] == r["cls_only_last"]["0"] == r["clean_accuracy"]
    for key in ("local", "random", "cls_only_first", "cls_only_last"):
        assert _unit(list(r[key].values()))


def check_attention_distance(r, model, data, kind):
    d = torch.tensor(r["distance"], dtype=torch.float64)
    assert tuple(d.shape) == (r["num_layers"], r["num_heads"])
    gh, gw = r["grid"]
    assert float(d.min()) >= 0 and float(d.max()) <= math.hypot(gh - 1, gw - 1) * r["patch_size"] + 1e-9


def check_attention_maps(r, model, data, kind):
    q = torch.tensor(r["query_maps"], dtype=torch.float64)          # (N, L, gh, gw)
    roll = torch.tensor(r["rollout"], dtype=torch.float64)          # (N, gh, gw)
    assert q.shape[0] == roll.shape[0] == 2 and float(q.min()) >= 0 and float(roll.min()) >= 0
    # attention rows are distributions over prefix + patch tokens: the patches' share is at most 1
    assert float(q.sum((-2, -1)).max()) <= 1 + 1e-4 and float(roll.sum((-2, -1)).max()) <= 1 + 1e-4


def check_pos_embed_similarity(r, model, data, kind):
    gh, gw = r["grid"]
    assert _square(r["similarity"], lo=-1.0).shape == (gh * gw, gh * gw)


def check_grouping(r, model, data, kind):
    P = r["num_patches"]
    for sig, ins in zip(r["significant_eigenvalues"], r["insignificant_eigenvalues"]):
        assert 0 <= sig <= P and sig + ins == pytest.approx(P)
    assert all(v >= 0 for v in r["noise_decay"])
    labels = torch.tensor(r["clusters"])
    assert int(labels.min()) >= 0 and int(labels.max()) < 2


def check_attention_stability(r, model, data, kind):
    flat = [v for row in r["cosine"] for v in row]
    assert all(0 - 1e-9 <= v <= 1 + 1e-9 for v in flat)            # attention maps are non-negative
    assert sum(r["histogram"]["counts"]) == len(data)
    assert torch.tensor(r["mask_distribution"]).shape == (2, 2)


def check_perturbation_semantics(r, model, data, kind):
    assert 0 <= r["top1"] <= r["top5"] <= 1 and 0 <= r["attack_success_rate"] <= 1
    assert r["classifier"] == "self" and len(r["visualisation"]["classes"]) == 2


CHECKS = {n: globals()[f"check_{n}"] for n in NAMES if f"check_{n}" in globals()}


def test_every_analysis_has_a_contract_checker_and_claims_known_families():
    assert set(CHECKS) == set(NAMES), "add a check_<name> for a new analysis"
    for name in NAMES:
        a = get_analysis(name)
        assert a.families and set(a.families) <= {*FAMILIES, "other"}, name      # other: no probe needed
        assert dataclasses.is_dataclass(a.Options), name


def test_the_probe_family_of_the_test_models():
    assert [family_of(_build(k)) for k in ("vit", "cnn")] == ["vit", "cnn"]


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name, kind, zoo, results):
    model, data = zoo[kind]
    a = get_analysis(name)
    if kind not in a.families:
        with pytest.raises(RobustvitError, match=f"does not apply to {kind} models") as e:
            run_analyses(model, data, [name], None, device="cpu")
        assert "\n" not in str(e.value) and "use:" in str(e.value)
        return
    r, out = results(name, kind)
    CHECKS[name](r, model, data, kind)
    expected = options_dict(a.parse(TINY.get(name, {})))
    assert r["options"] == expected                                 # the result records its options
    on_disk = json.loads((out / f"{name}.json").read_text())
    assert on_disk["options"] == expected and on_disk["analysis"] == name
    assert not any(k.startswith("_") for k in on_disk)
    assert json.loads(json.dumps(on_disk)) == on_disk
    assert r["figures"] and all((out / f).is_file() and (out / f).stat().st_size > 0 for f in r["figures"])


@pytest.mark.parametrize("name", NAMES)
def test_options_are_typed_with_one_line_errors(name):
    a = get_analysis(name)
    defaults = a.parse({})
    assert defaults == a.Options() and a.parse(options_dict(defaults)) == defaults   # stated once, round-trips
    with pytest.raises(RobustvitError, match=f"analysis '{name}' has no option 'bogus'") as e:
        a.parse({"bogus": "1"})
    assert "\n" not in str(e.value)
    for f in dataclasses.fields(a.Options):
        lo = f.metadata.get("min")
        if lo is None:
            continue
        with pytest.raises(RobustvitError, match=f"{f.name}=.*out of range") as e:
            a.parse({f.name: str(lo - 1)})
        assert "\n" not in str(e.value)
        with pytest.raises(RobustvitError, match=f"{f.name}='nan' is not valid"):
            a.parse({f.name: "nan"})


@pytest.mark.parametrize("name", NAMES)
def test_plain_function_takes_the_same_options(name):
    fn = getattr(analysis, name)
    kw = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert kw == [f.name for f in dataclasses.fields(get_analysis(name).Options)]
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY:
            assert p.default == getattr(get_analysis(name).Options(), p.name)


def test_plain_function_refuses_unknown_keywords_in_one_line(zoo):
    model, data = zoo["vit"]
    with pytest.raises(RobustvitError, match="lesion\\(\\) takes no keyword 'depth'.*run keywords: limit") as e:
        analysis.lesion(model, data, depth=2)
    assert "\n" not in str(e.value)


def test_plain_function_equals_the_registry_run(zoo, results):
    model, data = zoo["vit"]
    r, _ = results("lesion", "vit")
    p = analysis.lesion(model, data, samples=2, batch_size=4, seed=0)
    for key in ("clean_accuracy", "single", "random", "random_attention", "random_mlp", "options"):
        assert p[key] == r[key], key


def test_semantics_eps_is_checked_when_parsed():
    a = get_analysis("perturbation_semantics")
    assert a.parse({"eps": "8/255"}).eps == "8/255"
    for bad in ("0", "-1/255", "four"):
        with pytest.raises(RobustvitError, match="eps=") as e:
            a.parse({"eps": bad})
        assert "\n" not in str(e.value)


def test_registration_by_decorator_with_alias():
    from dataclasses import dataclass

    from robustvit.analysis.base import Analysis, register_analysis
    from robustvit.options import option

    @register_analysis
    class _Probe(Analysis):
        name = "_contract_probe"
        aliases = ("_contract-probe",)
        families = ("vit",)

        @dataclass
        class Options:
            k: int = option(3, min=1)

        def run(self, ctx, options):
            return {"k": options.k}

    try:
        assert get_analysis("_contract-probe") is get_analysis("_contract_probe")
        assert ANALYSES.parse_options("_contract-probe", {"k": "5"}).k == 5
        assert "_contract_probe" in list_analyses("_*")
    finally:
        ANALYSES._items.pop("_contract_probe", None)
        ANALYSES._aliases.pop("_contract-probe", None)


def options_table() -> str:
    """docs/analysis.md's options table, from the registry (every option, its type, default, range, meaning)."""
    from robustvit.options import describe

    def fmt(v):
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, (list, tuple)):
            return "+".join(map(str, v)) if v else "(empty)"
        if v == "":
            return "(empty)"
        return f"{v:g}" if isinstance(v, float) else str(v)

    rows = ["| analysis | option | type | default | range | meaning |", "|---|---|---|---|---|---|"]
    for name in NAMES:
        opts = get_analysis(name).Options
        bounds = {f.name: (f.metadata.get("min"), f.metadata.get("max")) for f in dataclasses.fields(opts)}
        entries = describe(opts)
        if not entries:
            rows.append(f"| `{name}` | – | | | | takes no options |")
        for e in entries:
            lo, hi = bounds[e["name"]]
            rng = f"{lo:g}–{hi:g}" if lo is not None and hi is not None else f"≥ {lo:g}" if lo is not None else ""
            typ = e["type"].replace(" | ", " / ")
            rows.append(f"| `{name}` | `{e['name']}` | {typ} | `{fmt(e['default'])}` | {rng} | "
                        f"{e['help'].replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"


def test_docs_options_table_is_the_registry():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
    assert options_table() in doc, "regenerate docs/analysis.md's options table with tests/analysis/test_contract.options_table()"
