"""The ViT probe reproduces each timm ViT family it supports — block outputs, attention maps and logits
against the model's own forward (hooks on its real blocks, independent of the probe's self-check) — and
refuses, in one line, what it does not reproduce."""

from __future__ import annotations


import pytest
import torch
from torch import nn

from robustvit.errors import RobustvitError
from robustvit.models import create_model
from robustvit.models.probe import BlockProbe, ViTProbe, make_probe


import families as FAM  # noqa: E402  (tests/conformance, on the path by tests/conftest.py)
#: families ``ViTProbe`` reproduces exactly (the others go to ``BlockProbe``)
EXACT = ["vit", "vit_cifar", "vit_gap", "vit_convstem", "deit", "deit3", "deit_distilled", "vit_reg_gap", "vit_reg_cls",
         "vit_qknorm", "vit_postnorm", "vit_map", "vit_parallel", "vit_xp", "vit_clip", "vit_fcnorm", "beit", "eva",
         "cait", "vit_hybrid"]
TOL = 1e-4


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def attention_sources(blk: nn.Module) -> list[nn.Module]:
    """Modules whose ``attn_drop`` receives the block's attention map, as timm computes it (test's own list)."""
    if hasattr(blk, "attns"):                     # ParallelThingsBlock
        return [b.attn for b in blk.attns]
    if hasattr(blk, "in_proj"):                   # ParallelScalingBlock
        return [blk]
    return [blk.attn]


def model_forward(model: nn.Module, x: torch.Tensor, blocks: nn.Module) -> tuple[list, list, torch.Tensor]:
    """The model's own block outputs (default, fused attention), its attention maps (a second pass with
    fused attention off, read at ``attn_drop``) and its logits."""
    outs: list[torch.Tensor] = []
    hs = [b.register_forward_hook(lambda m, a, y: outs.append(y)) for b in blocks]
    with torch.no_grad():
        logits = model(x)
    for h in hs:
        h.remove()
    maps: list[list[torch.Tensor]] = [[] for _ in blocks]
    hs, flags = [], []
    for i, b in enumerate(blocks):
        for src in attention_sources(b):
            if hasattr(src, "fused_attn"):
                flags.append((src, src.fused_attn))
                src.fused_attn = False
            hs.append(src.attn_drop.register_forward_hook(lambda m, a, y, i=i: maps[i].append(a[0])))
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    for src, f in flags:
        src.fused_attn = f
    return outs, [torch.cat(m, 1) for m in maps], logits


@pytest.mark.parametrize("key", EXACT)
def test_probe_reproduces_the_family(key):
    model = FAM.build(key)
    x = FAM.example_input(model, n=2, seed=1)
    probe = make_probe(model)
    assert isinstance(probe, ViTProbe), key
    net = model.net
    blocks = net.blocks
    real_blocks, real_maps, real_logits = model_forward(model, x, blocks)
    with torch.no_grad():
        out = probe.run(x, attentions=True)
    assert len(out.tokens) == len(blocks) == len(real_blocks)
    for i, (mine, real) in enumerate(zip(out.tokens, real_blocks)):
        assert rel(mine, real) <= TOL, (key, i, rel(mine, real))
    for i, (mine, real) in enumerate(zip(out.attentions, real_maps)):
        assert mine.shape == real.shape and rel(mine, real) <= TOL, (key, i)
        if key != "cait":                         # softmax maps (CaiT's are mixed across heads after it)
            torch.testing.assert_close(mine.sum(-1), torch.ones(mine.shape[:-1]), atol=1e-5, rtol=0)
    assert rel(out.logits, real_logits) <= TOL
    # the prefix: CLS (+ distillation) first, then registers; CaiT's CLS joins only in its head
    cls = getattr(net, "cls_token", None) is not None and key != "cait"
    regs = getattr(net, "reg_token", None)
    assert probe.has_class_token is cls
    assert probe.num_registers == (regs.shape[1] if regs is not None else 0)
    assert out.tokens[0].shape[1] == probe.num_tokens
    assert out.tokens[0][:, probe.patch_tokens].shape[1] == probe.grid_size[0] * probe.grid_size[1]
    assert probe.verify(x)["logits"] <= TOL


@pytest.mark.parametrize("kwargs", [
    dict(class_token=False, reg_tokens=2, no_embed_class=True, global_pool="avg"),
    dict(scale_attn_norm=True, qk_norm=True, init_values=0.5),
    dict(global_pool="map", class_token=False),
])
def test_vit_variants_beyond_the_family_list(kwargs):
    torch.manual_seed(0)
    model = create_model("vit_small_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                         num_classes=5, **kwargs).eval()
    FAM.perturb(model.net)
    x = torch.rand(2, 3, 32, 32)
    real_blocks, real_maps, logits = model_forward(model, x, model.net.blocks)
    with torch.no_grad():
        out = ViTProbe(model).run(x, attentions=True)
    assert all(rel(a, b) <= TOL for a, b in zip(out.tokens, real_blocks))
    assert all(rel(a, b) <= TOL for a, b in zip(out.attentions, real_maps))
    assert rel(out.logits, logits) <= TOL


def test_beit_shared_relative_position_bias_and_eva_without_rope():
    torch.manual_seed(0)
    for name, kw in (("beit_base_patch16_224", dict(use_shared_rel_pos_bias=True, use_rel_pos_bias=False,
                                                     use_abs_pos_emb=False)),
                     ("eva02_tiny_patch14_224", dict(patch_size=8, use_rot_pos_emb=False))):
        model = create_model(name, img_size=32, embed_dim=32, depth=2, num_heads=2, num_classes=5, **kw).eval()
        FAM.perturb(model.net)
        x = torch.rand(2, 3, 32, 32)
        real_blocks, real_maps, logits = model_forward(model, x, model.net.blocks)
        with torch.no_grad():
            out = ViTProbe(model).run(x, attentions=True)
        assert all(rel(a, b) <= TOL for a, b in zip(out.tokens, real_blocks)), name
        assert all(rel(a, b) <= TOL for a, b in zip(out.attentions, real_maps)), name
        assert rel(out.logits, logits) <= TOL


def test_post_norm_blocks_are_exact_where_a_pre_norm_recomputation_is_far_off():
    """``ResPostBlock``: x + norm1(attn(x)). Recomputing it as a pre-norm block (what the probe used to do)
    is off by tens of percent with LayerNorm gains ~N(1, 0.5); the probe is exact."""
    model = FAM.build("vit_postnorm")
    x = FAM.example_input(model)
    net = model.net
    with torch.no_grad():
        h = ViTProbe(model).embed(x)
        blk = net.blocks[0]
        real = blk(h)
        as_pre_norm = h + blk.attn(blk.norm1(h))
        as_pre_norm = as_pre_norm + blk.mlp(blk.norm2(as_pre_norm))
        out = ViTProbe(model).run(x)
    assert rel(as_pre_norm, real) > 0.3
    assert rel(out.tokens[0], real) <= TOL
    torch.testing.assert_close(out.logits, model(x), atol=1e-5, rtol=1e-4)


def test_a_block_the_probe_does_not_reproduce_is_refused_in_one_line(monkeypatch):
    from timm.models.vision_transformer import Block

    model = FAM.build("vit")
    x = FAM.example_input(model)

    def no_mlp(self, x, attn_mask=None, is_causal=False):   # a block type whose maths the probe does not know
        return x + self.ls1(self.attn(self.norm1(x)))

    monkeypatch.setattr(Block, "forward", no_mlp)
    probe = ViTProbe(model)
    with pytest.raises(RobustvitError) as err:
        probe.run(x)
    msg = str(err.value)
    assert "\n" not in msg and "VisionTransformer" in msg and "block 0 (Block)" in msg
    assert "does not support this block type" in msg and "relative" in msg
    with pytest.raises(RobustvitError):                      # and stays refused
        probe.run(x)
    fallback = make_probe(model)                              # hooks on the model's own forward: exact
    assert isinstance(fallback, BlockProbe)
    with torch.no_grad():
        torch.testing.assert_close(fallback.run(x).logits, model(x))
    assert fallback.num_prefix_tokens == 1 and fallback.has_class_token


def test_a_replaced_forward_on_an_instance_is_refused_at_construction():
    model = FAM.build("vit")
    blk = model.net.blocks[1]
    blk.forward = lambda x, **kw: x
    with pytest.raises(RobustvitError, match="block 1 .*replaced forward"):
        ViTProbe(model)
    assert isinstance(make_probe(model), BlockProbe)


def test_self_check_runs_once_per_input_size_and_restores_the_model():
    model = FAM.build("vit")
    model.train()
    probe = ViTProbe(model)
    calls = []
    h = model.net.blocks[0].register_forward_hook(lambda m, a, y: calls.append(1))
    x = FAM.example_input(model, n=3)
    probe.run(x)
    probe.run(x)
    h.remove()
    assert len(calls) == 1                    # the model's own forward ran once: the check (the probe calls sub-modules)
    probe.run(FAM.example_input(model, n=1)[:, :, :16, :16].repeat(1, 1, 2, 2)[:, :, :32, :32])   # same size: no check
    assert len(calls) == 1
    assert model.training and model.net.blocks[0].training          # modes restored
    assert all(b.attn.fused_attn == model.net.blocks[0].attn.fused_attn for b in model.net.blocks)


def test_unsupported_attention_or_model_is_refused_and_block_probe_refuses_unreadable_maps():
    relpos = FAM.build("vit_relpos")
    with pytest.raises(RobustvitError, match="does not support VisionTransformerRelPos"):
        ViTProbe(relpos)
    assert isinstance(make_probe(relpos), BlockProbe)
    parallel = FAM.build("vit_parallel")
    bp = BlockProbe(parallel)                 # no single ``attn`` per block: refuse, never crash
    x = FAM.example_input(parallel)
    with pytest.raises(RobustvitError, match="no attention map to read in block 0 \\(ParallelThingsBlock"):
        bp.run(x, attentions=True)
    with pytest.raises(RobustvitError, match="modes block"):
        bp.run(x, remove={0: "attn"})
    with torch.no_grad():
        torch.testing.assert_close(bp.run(x).logits, parallel(x))


def test_removals_on_post_norm_and_parallel_blocks():
    """Removing a branch removes its whole residual term (for post-norm blocks: norm included)."""
    for key in ("vit_postnorm", "vit_parallel", "vit_xp"):
        model = FAM.build(key)
        x = FAM.example_input(model)
        probe = ViTProbe(model)
        blk = model.net.blocks[1]
        with torch.no_grad():
            full = probe.run(x)
            h = full.tokens[0]
            no_attn = probe.run(x, remove={1: "attn"}).tokens[1]
            if key == "vit_postnorm":
                expected = h + blk.norm2(blk.mlp(h))
            elif key == "vit_parallel":
                expected = h + torch.stack([f(h) for f in blk.ffns]).sum(0)
            else:
                y = blk.in_proj(blk.in_norm(h))
                x_mlp = y.split(blk.in_split, -1)[0]
                x_mlp = x_mlp + blk.mlp_bias if blk.mlp_bias is not None else x_mlp
                expected = h + blk.ls(blk.mlp_out_proj(blk.mlp_act(x_mlp)))
            assert rel(no_attn, expected) <= TOL, key
            assert torch.equal(probe.run(x, remove={1: "block"}).tokens[1], h)


def test_masks_reach_every_family_and_cait_refuses_them():
    for key in ("vit_postnorm", "vit_parallel", "vit_xp", "beit", "eva", "vit_reg_gap"):
        model = FAM.build(key)
        x = FAM.example_input(model)
        probe = ViTProbe(model)
        eye = torch.eye(probe.num_tokens, dtype=torch.bool)
        with torch.no_grad():
            out = probe.run(x, attentions=True, attn_mask=eye)
            assert all(torch.allclose(a, eye.float().expand_as(a), atol=1e-6) for a in out.attentions), key
            same = probe.run(x, attn_mask=torch.ones_like(eye)).logits
        torch.testing.assert_close(same, model(x), atol=1e-5, rtol=1e-4)
    cait = FAM.build("cait")
    with pytest.raises(RobustvitError, match="talking-heads"):
        ViTProbe(cait).run(FAM.example_input(cait), attn_mask=torch.ones(16, 16, dtype=torch.bool))


@pytest.mark.parametrize("kwargs", [dict(rope_type="mixed"), dict(num_reg_tokens=2, class_token=False, global_pool="avg"),
                                    dict(qkv_fused=False), dict(use_post_norm=True)])
def test_eva_variants(kwargs):
    """EVA: per-block (mixed) rope, registers without CLS (rope skips the prefix), separate q/k/v, post-norm."""
    torch.manual_seed(0)
    model = create_model("eva02_tiny_patch14_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                         num_classes=5, **kwargs).eval()
    FAM.perturb(model.net)
    x = torch.rand(2, 3, 32, 32)
    real_blocks, real_maps, logits = model_forward(model, x, model.net.blocks)
    probe = ViTProbe(model)
    with torch.no_grad():
        out = probe.run(x, attentions=True)
    assert all(rel(a, b) <= TOL for a, b in zip(out.tokens, real_blocks))
    assert all(rel(a, b) <= TOL for a, b in zip(out.attentions, real_maps))
    assert rel(out.logits, logits) <= TOL
    if "num_reg_tokens" in kwargs:
        assert probe.num_registers == 2 and probe.num_prefix_tokens == 2 and not probe.has_class_token


def test_self_check_compares_attention_maps_too(monkeypatch):
    """A probe whose block outputs are right but whose reported map is not the model's is refused."""
    model = FAM.build("vit")
    probe = ViTProbe(model)
    real = ViTProbe._attention

    def wrong_map(self, attn, x, mask, keep, ctx):
        o, a = real(self, attn, x, mask, keep, ctx)
        return o, (a.transpose(-2, -1) if a is not None else None)

    monkeypatch.setattr(ViTProbe, "_attention", wrong_map)
    with pytest.raises(RobustvitError, match="attention map of block 0 \\(Block\\) differs"):
        probe.verify(FAM.example_input(model))


@pytest.mark.parametrize("key", ["fan", "fan_cifar"])
def test_fan_token_mixing_through_forward_with_attention(key):
    """robustvit's FAN: blocks and logits against the model's own (fused) forward; each map is the softmax of
    the block's token mixing on the block's real input."""
    model = FAM.build(key)
    x = FAM.example_input(model)
    blocks = model.net.blocks
    ins, outs = [], []

    def keep(m, a, y):
        ins.append(a[0])
        outs.append(y)

    hooks = [b.register_forward_hook(keep) for b in blocks]
    with torch.no_grad():
        logits = model(x)
    for h in hooks:
        h.remove()
    probe = make_probe(model)
    assert isinstance(probe, ViTProbe) and probe.family == "fan" and probe.num_prefix_tokens == 0
    with torch.no_grad():
        out = probe.run(x, attentions=True)
        for blk, h, real, mine, a in zip(blocks, ins, outs, out.tokens, out.attentions):
            assert rel(mine, real) <= TOL
            _, ref = blk.attn.forward_with_attention(blk.norm1(h))
            assert rel(a, ref) <= TOL
    assert rel(out.logits, logits) <= TOL


def test_block_probe_prefix_tokens_match_its_token_sequences():
    """BlockProbe's prefix count is the one inside the blocks: CLS (+ registers) for a ViT-like model, none for
    XCiT / FAN-like models whose class token joins after the blocks."""
    torch.manual_seed(0)
    relpos = create_model("vit_relpos_small_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2,
                          num_heads=2, num_classes=5, class_token=True, global_pool="token").eval()
    xcit = FAM.build("xcit")
    for model, pre, cls in ((relpos, 1, True), (xcit, 0, False)):
        probe = make_probe(model)
        assert isinstance(probe, BlockProbe)
        with torch.no_grad():
            out = probe.run(torch.rand(2, 3, 32, 32), attentions=True)
        assert probe.num_prefix_tokens == pre and probe.has_class_token is cls and probe.num_registers == 0
        assert out.tokens[0].shape[1] == probe.num_tokens
        assert out.attentions[0].shape[-1] == (probe.num_tokens if pre else out.attentions[0].shape[-1])


def test_hybrid_patch_size_is_in_pixels():
    """A hybrid ViT's ``patch_embed.patch_size`` counts cells of its CNN stem's feature map; the probe's
    ``patch_size`` is pixels per token (what patch masks and attention distances need)."""
    model = FAM.build("vit_hybrid")                # 64 px images, a 2×2 token grid
    probe = ViTProbe(model)
    assert probe.grid_size == (2, 2) and probe.patch_size == 32 and model.net.patch_embed.patch_size[0] == 8


def test_removing_a_shape_changing_block_is_refused_in_one_line():
    model = FAM.build("efficientformer")
    probe = make_probe(model)
    x = FAM.example_input(model)
    with torch.no_grad():
        changes = []
        hooks = [b.register_forward_hook(lambda m, a, y: changes.append(tuple(a[0].shape) != tuple(y.shape)))
                 for b in probe.blocks]
        model(x)
        for h in hooks:
            h.remove()
    i = changes.index(True)
    with pytest.raises(RobustvitError, match=f"removing a .* block of EfficientFormer is undefined") as err:
        probe.run(x, remove={i: "block"})
    assert "\n" not in str(err.value)
    assert not any(b._forward_hooks for b in probe.blocks)          # hooks removed after the refusal


def test_convit_block_probe_reports_patch_tokens_of_every_block():
    """ConViT's CLS joins after its local blocks: every block's tokens are reported as the P patch tokens."""
    model = FAM.build("convit")
    x = FAM.example_input(model)
    outs = []
    hooks = [b.register_forward_hook(lambda m, a, y: outs.append(y)) for b in model.net.blocks]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    probe = make_probe(model)
    with torch.no_grad():
        toks = probe.run(x).tokens
    assert isinstance(probe, BlockProbe) and probe.num_prefix_tokens == 0 and not probe.has_class_token
    assert [o.shape[1] for o in outs] == [16, 17]                   # no CLS in the local block, CLS after it
    assert all(t.shape[1] == 16 for t in toks)
    assert torch.equal(toks[0], outs[0]) and torch.equal(toks[1], outs[1][:, 1:])
