"""synthshapes masks and boxes: the images are unchanged, the masks line up with what is drawn, boxes enclose them."""

import torch

from robustvit.data import create_dataset
from robustvit.data.dense import coco_ground_truth
from robustvit.data.synthshapes import _chunk_labels, _render_chunk, boxes_from_masks, render_chunk


def test_images_unchanged_and_classes() -> None:
    plain = create_dataset("synthshapes:test,count=40")
    dense = create_dataset("synthshapes:test,count=40,masks=1,boxes=1")
    idx = torch.arange(40)
    assert torch.equal(plain.get_batch(idx)[0], dense.get_batch(idx)[0])
    assert dense.classes == ["background"] + plain.classes
    assert torch.equal(dense.get_batch(idx)[1], plain.get_batch(idx)[1] + 1)
    assert dense.spec.endswith(",masks=1,boxes=1")


def test_masks_hold_the_image_label_and_match_the_drawing() -> None:
    ds = create_dataset("synthshapes:test,count=64,masks=1")
    idx = torch.arange(64)
    masks, labels = ds.get_masks(idx), ds.labels[idx]
    for m, y in zip(masks, labels):
        assert set(m.unique().tolist()) == {0, int(y)}          # background and the image's own shape only
    # the rendered layers: img = alpha·fg + (1 − alpha)·bg + noise(σ = 0.03), so inside the mask the image shows
    # the foreground layer and outside the background layer (a flipped, shifted or transposed mask fails)
    lab, tex, gen = _chunk_labels(0, 32, 1, 10, 0.5, False)
    img, layers = _render_chunk(lab, tex, 32, gen, layers=True)
    assert torch.equal(img, render_chunk(0, 32, 1, 10, 0.5))
    x = img[:64].float() / 255
    fg, bg, inside = layers["fg"][:64], layers["bg"][:64], (masks > 0)[:, None].expand(-1, 3, -1, -1)
    alpha = layers["alpha"][:64, None].expand(-1, 3, -1, -1)
    core_in, core_out = inside & (alpha == 1), ~inside & (alpha == 0)
    assert ((x - fg).abs()[core_in].mean() < 0.04) and ((x - bg).abs()[core_out].mean() < 0.04)
    assert (fg - bg).abs()[core_in].mean() > 0.15          # the layers differ: the check above has teeth
    assert core_in.sum() > 0.8 * inside.sum()               # most of the mask is fully covered


def test_masks_do_not_depend_on_access_order() -> None:
    a = create_dataset("synthshapes:test,count=600,masks=1")
    b = create_dataset("synthshapes:test,count=600,masks=1")
    idx = torch.tensor([599, 3, 510, 3])
    assert torch.equal(a.get_masks(idx), b.get_masks(torch.arange(600))[idx])


def test_boxes_from_masks_by_hand() -> None:
    m = torch.zeros(2, 5, 6, dtype=torch.long)
    m[0, 1:4, 2:5] = 3
    m[0, 2, 1] = 3
    assert boxes_from_masks(m).tolist() == [[1.0, 1.0, 5.0, 4.0], [0.0, 0.0, 0.0, 0.0]]


def test_boxes_enclose_the_mask_tightly_and_coco_ground_truth() -> None:
    ds = create_dataset("synthshapes:test,count=30,masks=1,boxes=1")
    idx = torch.arange(30)
    masks, targets = ds.get_masks(idx), ds.get_targets(idx)
    for m, t, y in zip(masks, targets, ds.labels):
        x0, y0, x1, y1 = (int(v) for v in t["boxes"][0])
        fg = m > 0
        assert fg[:, :x0].sum() == 0 and fg[:, x1:].sum() == 0 and fg[:y0].sum() == 0 and fg[y1:].sum() == 0
        assert fg[:, x0].any() and fg[:, x1 - 1].any() and fg[y0].any() and fg[y1 - 1].any()
        assert t["labels"].tolist() == [int(y)]
    gt = coco_ground_truth(ds, idx)
    assert len(gt["images"]) == 30 and len(gt["annotations"]) == 30
    a = gt["annotations"][4]
    b = targets[4]["boxes"][0].tolist()
    assert a["bbox"] == [b[0], b[1], b[2] - b[0], b[3] - b[1]] and a["category_id"] == int(ds.labels[4])
    assert [c["id"] for c in gt["categories"]] == list(range(1, 11))
