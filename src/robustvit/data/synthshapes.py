"""``synthshapes``: the embedded, procedurally generated data set (no download, no files).

Each image shows one shape (the class: circle, square, triangle, …) filled with a texture (stripes, dots, …)
over a textured, shaded background, at a random position, scale, rotation and colour, with mild pixel noise.
With probability ``texture_correlation`` the texture is the class's own (texture k ↔ class k), else random, so
texture partly solves the task — and the **cue-conflict** variant (shape of one class, texture of another;
Geirhos et al. 2019, arXiv:1811.12231) tests shape vs texture bias. Deterministic given (seed, size, classes,
texture_correlation, variant): image i is the same whatever ``count``. Images are uint8 (N, 3, H, W).

>>> x, y, t = render_synthshapes(count=20, size=32, seed=0)
>>> x.shape, x.dtype, torch.equal(render_synthshapes(count=5, size=32, seed=0)[0], x[:5])
(torch.Size([20, 3, 32, 32]), torch.uint8, True)
"""

from __future__ import annotations

import math

import torch

from robustvit.data.base import BatchedImageDataset
from robustvit.errors import RobustvitError
from robustvit.utils import derive_seed

SHAPES = ("circle", "square", "triangle", "plus", "ring", "star", "hexagon", "crescent", "bar",
          "half_disc", "ell", "x_cross")
TEXTURES = ("stripes_0", "stripes_90", "stripes_45", "stripes_135", "checker", "dots", "rings", "grid",
            "waves", "solid", "blotches", "zigzag")
MAX_CLASSES = len(SHAPES)
SPLITS = {"train": (10_000, 0), "test": (2_000, 1), "cue_conflict": (1_000, 2)}  # default count, seed
_CHUNK_TARGET = 500


def _box(px: torch.Tensor, py: torch.Tensor, bx: float, by: float) -> torch.Tensor:
    """Signed distance to the box of half-sides (bx, by)."""
    qx, qy = px.abs() - bx, py.abs() - by
    outside = torch.sqrt(qx.clamp_min(0) ** 2 + qy.clamp_min(0) ** 2)
    return outside + torch.maximum(qx, qy).clamp_max(0)


def shape_sdf(k: int, px: torch.Tensor, py: torch.Tensor) -> torch.Tensor:
    """(Approximate) signed distance to shape ``k`` of unit size in local coordinates; < 0 inside."""
    r = torch.sqrt(px * px + py * py)
    name = SHAPES[k]
    if name == "circle":
        return r - 0.9
    if name == "square":
        return _box(px, py, 0.75, 0.75)
    if name == "triangle":  # equilateral, circumradius 1
        k3 = math.sqrt(3.0)
        return torch.maximum(py * -1 - 0.5, (k3 * px.abs() + py) / 2 - 0.5)
    if name == "plus":
        return torch.minimum(_box(px, py, 0.95, 0.3), _box(px, py, 0.3, 0.95))
    if name == "x_cross":
        u, v = (px + py) / math.sqrt(2), (px - py) / math.sqrt(2)
        return torch.minimum(_box(u, v, 0.95, 0.28), _box(u, v, 0.28, 0.95))
    if name == "ring":
        return (r - 0.7).abs() - 0.25
    if name == "star":
        a = torch.atan2(py, px)
        return (r - (0.5 + 0.45 * torch.cos(5 * a).clamp_min(0) ** 0.7)) * 0.6
    if name == "hexagon":
        return torch.maximum(px.abs() * math.cos(math.pi / 6) + py.abs() * 0.5, py.abs()) - 0.8
    if name == "crescent":
        r2 = torch.sqrt((px - 0.45) ** 2 + py ** 2)
        return torch.maximum(r - 0.95, 0.75 - r2)
    if name == "bar":
        return _box(px, py, 0.95, 0.35)
    if name == "half_disc":
        return torch.maximum(r - 0.95, py - 0.1)
    if name == "ell":
        return torch.minimum(_box(px + 0.55, py, 0.35, 0.9), _box(px, py - 0.55, 0.9, 0.35))
    raise AssertionError(name)


def texture(k: int, x: torch.Tensor, y: torch.Tensor, freq: torch.Tensor, phase: torch.Tensor,
            noise: torch.Tensor) -> torch.Tensor:
    """Texture ``k`` in [0, 1] at world coordinates (x, y) (n, H, W); freq/phase (n, 1, 1)."""
    name = TEXTURES[k]
    s = lambda t: 0.5 + 0.5 * torch.sin(t)  # noqa: E731
    if name.startswith("stripes_"):
        a = math.radians(float(name.split("_")[1]))
        return (s(freq * (x * math.cos(a) + y * math.sin(a)) + phase) > 0.5).float()
    if name == "checker":
        return ((torch.sin(freq * x + phase) * torch.sin(freq * y + phase)) > 0).float()
    if name == "dots":
        return (s(freq * x + phase) * s(freq * y + phase) > 0.45).float()
    if name == "rings":
        return (s(1.2 * freq * torch.sqrt(x * x + y * y) + phase) > 0.5).float()
    if name == "grid":
        return ((s(freq * x + phase) > 0.8) | (s(freq * y + phase) > 0.8)).float()
    if name == "waves":
        return s(freq * y + 2.0 * torch.sin(0.5 * freq * x) + phase)
    if name == "solid":
        return torch.full_like(x, 0.5)
    if name == "blotches":
        return noise
    if name == "zigzag":
        tri = torch.abs(torch.remainder(0.5 * freq * x / math.pi + phase, 2.0) - 1.0)
        return (s(freq * y + 3.0 * tri) > 0.5).float()
    raise AssertionError(name)


def _value_noise(n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """Binary blotches (n, size, size): 6 × 6 random values upsampled bicubically, thresholded at 1/2."""
    low = torch.rand((n, 1, 6, 6), generator=gen)
    up = torch.nn.functional.interpolate(low, size=(size, size), mode="bicubic", align_corners=False)
    return (up[:, 0] > 0.5).float()


def _render_chunk(labels: torch.Tensor, tex: torch.Tensor, size: int, gen: torch.Generator,
                  layers: bool = False) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """uint8 images; with ``layers``, also the shape's coverage ``alpha`` (n, H, W) and the foreground and
    background layers (n, 3, H, W) the image composites (``img = alpha·fg + (1 − alpha)·bg + noise``)."""
    n = labels.numel()
    rnd = lambda *shape: torch.rand(shape, generator=gen)  # noqa: E731
    lin = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    xx, yy = xx.expand(n, size, size), yy.expand(n, size, size)
    # geometry: centre, radius, rotation (±20°, so that plus/x_cross and square/hexagon stay apart)
    cx, cy = (rnd(n, 1, 1) - 0.5) * 0.5, (rnd(n, 1, 1) - 0.5) * 0.5
    scale = 0.55 + rnd(n, 1, 1) * 0.25
    theta = (rnd(n, 1, 1) - 0.5) * math.radians(40)
    dx, dy = xx - cx, yy - cy
    cos, sin = torch.cos(theta), torch.sin(theta)
    px, py = (cos * dx + sin * dy) / scale, (-sin * dx + cos * dy) / scale
    # textures: foreground (class-tied or random) and background (random, low contrast)
    freq = 15 + rnd(n, 1, 1) * 8
    phase = rnd(n, 1, 1) * 2 * math.pi
    noise = _value_noise(n, size, gen)
    bg_tex = torch.randint(len(TEXTURES), (n,), generator=gen)
    bg_freq, bg_phase = 10 + rnd(n, 1, 1) * 12, rnd(n, 1, 1) * 2 * math.pi
    sdf = torch.empty(n, size, size)
    fg_p = torch.empty(n, size, size)
    bg_p = torch.empty(n, size, size)
    for k in labels.unique().tolist():
        m = labels == k
        sdf[m] = shape_sdf(k, px[m], py[m])
    for k in range(len(TEXTURES)):
        m = tex == k
        if m.any():
            fg_p[m] = texture(k, xx[m], yy[m], freq[m], phase[m], noise[m])
        m = bg_tex == k
        if m.any():
            bg_p[m] = texture(k, xx[m], yy[m], bg_freq[m], bg_phase[m], noise[m].flip(-1))
    pixel = 2.0 / size
    alpha = (0.5 - sdf * scale / pixel).clamp(0, 1)[:, None]
    # colours: a dark/bright polarity per image keeps the shape visible against its background
    polarity = (rnd(n, 1, 1, 1) < 0.5).float()
    lo, hi = rnd(n, 3, 1, 1) * 0.45, 0.55 + rnd(n, 3, 1, 1) * 0.45
    c1 = polarity * hi + (1 - polarity) * lo
    c2 = polarity * (0.35 + rnd(n, 3, 1, 1) * 0.65) + (1 - polarity) * rnd(n, 3, 1, 1) * 0.65
    fg = c1 * fg_p[:, None] + c2 * (1 - fg_p[:, None])
    b1 = polarity * lo.flip(1) + (1 - polarity) * hi.flip(1)
    b2 = (b1 + (rnd(n, 3, 1, 1) - 0.5) * 0.3).clamp(0, 1)
    ga = rnd(n, 1, 1) * 2 * math.pi
    gw = (0.5 + 0.5 * (xx * torch.cos(ga) + yy * torch.sin(ga)) / math.sqrt(2))[:, None]
    bg = b1 * gw + b2 * (1 - gw) + 0.12 * (bg_p[:, None] - 0.5)
    img = alpha * fg + (1 - alpha) * bg
    img = img + 0.03 * torch.randn(img.shape, generator=gen)
    out = (img.clamp(0, 1) * 255 + 0.5).to(torch.uint8)
    if layers:
        return out, {"alpha": alpha[:, 0], "fg": fg, "bg": bg}
    return out


def _check(count: int, size: int, classes: int, texture_correlation: float) -> None:
    if not 2 <= classes <= MAX_CLASSES:
        raise RobustvitError(f"synthshapes supports 2 to {MAX_CLASSES} classes, got {classes}")
    if not 8 <= size <= 224:
        raise RobustvitError(f"synthshapes image size must be between 8 and 224, got {size}")
    if not 0.0 <= texture_correlation <= 1.0:
        raise RobustvitError(f"texture_correlation must be in [0, 1], got {texture_correlation}")
    if count < 1:
        raise RobustvitError(f"count must be >= 1, got {count}")


def chunk_size(classes: int) -> int:
    """Images are generated in chunks of ``K·⌈500/K⌉``, each from its own seed."""
    return classes * math.ceil(_CHUNK_TARGET / classes)


def _chunk_labels(c: int, size: int, seed: int, classes: int, texture_correlation: float, cue_conflict: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Shape and texture labels of chunk ``c`` and the generator, positioned to render its images."""
    chunk = chunk_size(classes)
    gen = torch.Generator().manual_seed(derive_seed(seed, "synthshapes", c, size, classes,
                                                    texture_correlation, cue_conflict))
    labels = (torch.arange(chunk) % classes)[torch.randperm(chunk, generator=gen)]
    rand_tex = torch.randint(classes, (chunk,), generator=gen)
    if cue_conflict:
        shift = torch.randint(1, classes, (chunk,), generator=gen)
        tex = (labels + shift) % classes
    else:
        tied = torch.rand(chunk, generator=gen) < texture_correlation
        tex = torch.where(tied, labels, rand_tex)
    return labels, tex, gen


def synthshapes_labels(count: int, size: int = 32, seed: int = 0, classes: int = 10,
                       texture_correlation: float = 0.5, cue_conflict: bool = False
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The shape and texture labels of :func:`render_synthshapes` without rendering any image."""
    _check(count, size, classes, texture_correlation)
    chunk = chunk_size(classes)
    parts = [_chunk_labels(c, size, seed, classes, texture_correlation, cue_conflict)[:2]
             for c in range(math.ceil(count / chunk))]
    return torch.cat([p[0] for p in parts])[:count], torch.cat([p[1] for p in parts])[:count]


def render_chunk(c: int, size: int = 32, seed: int = 0, classes: int = 10, texture_correlation: float = 0.5,
                 cue_conflict: bool = False) -> torch.Tensor:
    """uint8 images (chunk size, 3, size, size) of chunk ``c`` (the same as in :func:`render_synthshapes`)."""
    labels, tex, gen = _chunk_labels(c, size, seed, classes, texture_correlation, cue_conflict)
    return _render_chunk(labels, tex, size, gen)


def render_chunk_masks(c: int, size: int = 32, seed: int = 0, classes: int = 10, texture_correlation: float = 0.5,
                       cue_conflict: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk ``c`` as (uint8 images, uint8 masks (chunk size, size, size)): mask value 0 is background and
    ``k + 1`` the pixels whose centre lies inside the shape of class ``k`` (coverage > 1/2). The images are
    those of :func:`render_chunk`, bit for bit."""
    labels, tex, gen = _chunk_labels(c, size, seed, classes, texture_correlation, cue_conflict)
    img, layers = _render_chunk(labels, tex, size, gen, layers=True)
    inside = layers["alpha"] > 0.5
    return img, (inside * (labels + 1).view(-1, 1, 1)).to(torch.uint8)


def boxes_from_masks(masks: torch.Tensor) -> torch.Tensor:
    """Tight boxes (n, 4) ``[x0, y0, x1, y1]`` in pixels (x1, y1 exclusive, as COCO's x + w) of each mask's
    non-zero pixels; all zeros for an empty mask."""
    fg = masks != 0
    n, h, w = fg.shape
    cols, rows = fg.any(1), fg.any(2)
    xs, ys = torch.arange(w), torch.arange(h)
    big = max(h, w) + 1
    x0 = torch.where(cols, xs, big).amin(1)
    x1 = torch.where(cols, xs + 1, -1).amax(1)
    y0 = torch.where(rows, ys, big).amin(1)
    y1 = torch.where(rows, ys + 1, -1).amax(1)
    box = torch.stack([x0, y0, x1, y1], 1).float()
    return torch.where(fg.flatten(1).any(1, keepdim=True), box, torch.zeros_like(box))


def render_synthshapes(count: int, size: int = 32, seed: int = 0, classes: int = 10,
                       texture_correlation: float = 0.5, cue_conflict: bool = False
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Render ``count`` images → (uint8 images (N, 3, size, size), shape labels (N,), texture labels (N,)).

    Classes are exactly balanced within every block of ``K·⌈500/K⌉`` images. In the cue-conflict variant
    the texture is always another class's texture.
    """
    y, t = synthshapes_labels(count, size, seed, classes, texture_correlation, cue_conflict)
    chunk = chunk_size(classes)
    x = torch.cat([render_chunk(c, size, seed, classes, texture_correlation, cue_conflict)
                   for c in range(math.ceil(count / chunk))])
    return x[:count], y, t


class SynthShapesDataset(BatchedImageDataset):
    """synthshapes generated on demand: a batch renders only the chunks its images fall in, and rendered
    chunks are kept (shuffled training revisits them), so ``--limit 50`` at 224 px renders one chunk, not the
    whole split. Image ``i`` is the same as ``render_synthshapes(...)[0][i]``.

    ``masks=True`` / ``boxes=True`` make it a dense-prediction data set: the classes become
    ``["background", *shapes]`` (label of an image = its shape class + 1), :meth:`get_masks` gives per-pixel
    masks and :meth:`get_targets` / :meth:`coco_ground_truth` the shape's box (COCO category id = label)."""

    ignore_index = 255

    def __init__(self, count: int, size: int = 32, seed: int = 0, classes: int = 10,
                 texture_correlation: float = 0.5, cue_conflict: bool = False, spec: str = "",
                 masks: bool = False, boxes: bool = False) -> None:
        self.labels, tex = synthshapes_labels(count, size, seed, classes, texture_correlation, cue_conflict)
        self.classes, self.spec = list(SHAPES[:classes]), spec
        self.extra = {"texture_labels": tex}
        self.dense = bool(masks or boxes)
        self.has_masks, self.has_boxes = bool(masks), bool(boxes)
        if self.dense:
            self.classes = ["background", *self.classes]
            self.labels = self.labels + 1
        self._args = (size, seed, classes, texture_correlation, cue_conflict)
        self._chunk = chunk_size(classes)
        self._chunks: dict[int, torch.Tensor] = {}
        self._masks: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.labels)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images (rendered in 8 bits) and labels."""
        size = self._args[0]
        x, index = self._gather(self._chunks, index, (3, size, size))
        return x, self.labels[index]

    def _gather(self, rendered: dict[int, torch.Tensor], index: torch.Tensor, shape: tuple[int, ...]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Items ``index`` of the chunks in ``rendered`` (images or masks; missing chunks rendered), and ``index``."""
        index = torch.as_tensor(index, dtype=torch.long).cpu()
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(self)):
            raise IndexError(f"synthshapes index out of range 0..{len(self) - 1}")
        chunks = index // self._chunk
        out = torch.empty(len(index), *shape, dtype=torch.uint8)
        for c in chunks.unique().tolist():
            sel = chunks == c
            self._render(c)
            out[sel] = rendered[c][index[sel] - c * self._chunk]
        return out, index

    def _render(self, c: int) -> None:
        """Render chunk ``c`` (and its masks for a dense data set) unless it is kept already."""
        if c in self._chunks and (not self.dense or c in self._masks):
            return
        if self.dense:
            self._chunks[c], self._masks[c] = render_chunk_masks(c, *self._args)
        else:
            self._chunks[c] = render_chunk(c, *self._args)

    def get_masks(self, index: torch.Tensor) -> torch.Tensor:
        """Per-pixel class masks (n, H, W), long: 0 background, k + 1 shape class k (needs ``masks=1``)."""
        if not self.has_masks:
            raise RobustvitError(f"{self.spec or 'synthshapes'} has no masks; add the option masks=1 "
                                 "(e.g. synthshapes:test,masks=1)")
        return self._gather_masks(index)

    def _gather_masks(self, index: torch.Tensor) -> torch.Tensor:
        size = self._args[0]
        return self._gather(self._masks, index, (size, size))[0].long()

    def get_targets(self, index: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Detection targets as torchvision's detection models take them: per image ``boxes`` (1, 4) float
        ``[x0, y0, x1, y1]`` in pixels and ``labels`` (1,) long (shape class + 1; needs ``boxes=1``)."""
        if not self.has_boxes:
            raise RobustvitError(f"{self.spec or 'synthshapes'} has no boxes; add the option boxes=1 "
                                 "(e.g. synthshapes:test,boxes=1)")
        index = torch.as_tensor(index, dtype=torch.long).cpu()
        boxes = boxes_from_masks(self._gather_masks(index))
        return [{"boxes": boxes[i:i + 1], "labels": self.labels[index[i]].view(1)} for i in range(len(index))]

    def image_sizes(self, index: torch.Tensor) -> list[tuple[int, int]]:
        """(height, width) of each image."""
        return [(self._args[0], self._args[0])] * len(torch.as_tensor(index))
