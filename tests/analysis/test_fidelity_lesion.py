"""Lesion (Bhojanapalli et al., arXiv:2103.14586, Fig. 8 right): n random attention-only and MLP-only
removals against a hand-written forward of the timm blocks, their sampling, and the deviation notes."""

import math

import pytest
import torch

from robustvit.analysis import lesion, run_analyses
from robustvit.analysis.lesion import random_subsets
from robustvit.utils import derive_seed


def _hand_forward(model, x, remove):
    """The timm ViT written out: a removed attention / MLP branch adds nothing (the residual passes)."""
    net = model.net
    h = net.norm_pre(net._pos_embed(net.patch_embed((x - model.mean) / model.std)))
    for i, blk in enumerate(net.blocks):
        if remove.get(i) != "attn":
            h = h + blk.drop_path1(blk.ls1(blk.attn(blk.norm1(h))))
        if remove.get(i) != "mlp":
            h = h + blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(h))))
    return net.forward_head(net.norm(h))


def _acc(model, data, remove):
    x, y = data.get_batch(torch.arange(len(data)))
    with torch.no_grad():
        return (_hand_forward(model, x, remove).argmax(1) == y).float().mean().item()


def test_random_attention_and_mlp_removals_equal_the_hand_forward(cls_vit, tiny_data):
    with torch.no_grad():                                   # weights that make every branch matter
        for b in cls_vit.net.blocks:
            b.mlp.fc2.weight.mul_(4.0)
            b.attn.proj.weight.mul_(4.0)
    r = lesion(cls_vit, tiny_data, samples=4, batch_size=5)
    assert r["clean_accuracy"] == pytest.approx(_acc(cls_vit, tiny_data, {}))
    for key, mode in (("random_attention", "attn"), ("random_mlp", "mlp")):
        assert sorted(r[key]) == ["1", "2"]
        for n, v in r[key].items():
            accs = [_acc(cls_vit, tiny_data, {b: mode for b in s}) for s in v["blocks"]]
            t = torch.tensor(accs, dtype=torch.float64)
            assert v["mean"] == pytest.approx(float(t.mean())) and v["samples"] == 4
            assert v["stderr"] == pytest.approx(float(t.std()) / math.sqrt(4))
            assert v["min"] == pytest.approx(min(accs)) and v["max"] == pytest.approx(max(accs))
    for i in range(3):
        assert r["single"]["attention"][i] == pytest.approx(_acc(cls_vit, tiny_data, {i: "attn"}))
        assert r["single"]["mlp"][i] == pytest.approx(_acc(cls_vit, tiny_data, {i: "mlp"}))


def test_removing_a_dead_branch_changes_nothing(cls_vit, tiny_data):
    with torch.no_grad():                                   # block 1's attention and block 2's MLP output zero
        for b in cls_vit.net.blocks:
            b.mlp.fc2.weight.mul_(4.0), b.attn.proj.weight.mul_(4.0)
        cls_vit.net.blocks[1].attn.proj.weight.zero_(), cls_vit.net.blocks[1].attn.proj.bias.zero_()
        cls_vit.net.blocks[2].mlp.fc2.weight.zero_(), cls_vit.net.blocks[2].mlp.fc2.bias.zero_()
    r = lesion(cls_vit, tiny_data, samples=3, batch_size=12)
    assert r["single"]["attention"][1] == r["clean_accuracy"] == r["single"]["mlp"][2]
    assert r["single"]["attention"][0] != r["clean_accuracy"]              # a live branch does matter
    # n = 2 with the first block kept: the only subset is {1, 2}; the attention subset removes the dead
    # attention of block 1 and the live one of block 2
    assert all(s == [1, 2] for s in r["random_attention"]["2"]["blocks"] + r["random_mlp"]["2"]["blocks"])
    assert r["random_attention"]["2"]["mean"] == pytest.approx(r["single"]["attention"][2])
    assert r["random_mlp"]["2"]["mean"] == pytest.approx(r["single"]["mlp"][1])


def test_subsets_paper_defaults_first_block_kept_and_block_seeds_unchanged():
    for part in ("block", "attn", "mlp"):
        subs = random_subsets(12, 5, 25, seed=0, part=part)
        assert len(subs) == 25 and all(len(s) == 5 and len(set(s)) == 5 and min(s) >= 1 for s in subs)
    assert random_subsets(12, 5, 25, 0, "attn") != random_subsets(12, 5, 25, 0, "mlp")
    old = [sorted((torch.randperm(11, generator=torch.Generator().manual_seed(derive_seed(0, "lesion", 4, s)))[:4]
                   + 1).tolist()) for s in range(25)]
    assert random_subsets(12, 4, 25, seed=0) == old          # whole-block subsets as before
    free = random_subsets(4, 1, 40, 0, "attn", keep_first=False)
    assert any(s == [0] for s in free) and all(0 <= s[0] <= 3 for s in free)


def test_lesion_defaults_are_the_papers_and_deviations_are_named(cls_vit, tiny_data):
    r = run_analyses(cls_vit, tiny_data, ["lesion"], None, batch_size=12, device="cpu")["lesion"]
    assert r["options"]["samples"] == 25 and r["protocol"]["comparable"] is True and r["protocol"]["deviations"] == []
    assert all(v["samples"] == 25 for k in ("random", "random_attention", "random_mlp") for v in r[k].values())
    assert r["random_first_kept"] == {"random": True, "random_attention": True, "random_mlp": True}
    for spec, words in (("lesion:samples=3", "3 random subsets per n (the paper: 25)"),
                        ("lesion:random=0", "no random removals"),
                        ("lesion:random_parts=block", "random removals left out: random_attention, random_mlp"),
                        ("lesion:samples=2:keep_first=0", "may include the first block")):
        r = run_analyses(cls_vit, tiny_data, [spec], None, batch_size=12, device="cpu")["lesion"]
        assert r["protocol"]["comparable"] is False and any(words in n for n in r["protocol"]["deviations"]), (spec, r["protocol"]["deviations"])
    r = run_analyses(cls_vit, tiny_data, ["lesion:random_parts=attn+mlp:samples=2"], None, batch_size=12,
                     device="cpu")["lesion"]
    assert r["random"] == {} and sorted(r["random_mlp"]) == ["1", "2"]
