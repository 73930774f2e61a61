"""Draw docs/img/dense/synthshapes_segmentation.png: test images, true masks and a segmentation checkpoint's
predictions, clean and corrupted (the mask is the same for both).

    python benchmarks/dense_figure.py CHECKPOINT_DIR [OUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from robustvit.corruptions import corrupt  # noqa: E402
from robustvit.data import create_dataset  # noqa: E402
from robustvit.models import create_model  # noqa: E402
from robustvit.models.segmenter import ARCHITECTURE  # noqa: E402,F401  (registers the architecture)

CORRUPTIONS = (("gaussian_noise", 3), ("motion_blur", 3), ("fog", 3))


def main() -> None:
    ckpt = sys.argv[1]
    out = Path(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).resolve().parents[1] / "docs" / "img" / "dense" / "synthshapes_segmentation.png")
    torch.manual_seed(0)
    model = create_model(ckpt).eval()
    ds = create_dataset("synthshapes:test,masks=1")
    idx = torch.tensor([0, 1, 2, 3])
    x, _ = ds.get_batch(idx)
    masks = ds.get_masks(idx)
    k = ds.num_classes
    colours = ["black"] + [plt.get_cmap("tab10")(i) for i in range(k - 1)]
    cmap = ListedColormap(colours)
    cols = [("image", None), ("true mask", None), ("prediction", None)]
    for name, sev in CORRUPTIONS:
        cols += [(f"{name} {sev}", (name, sev)), ("prediction", (name, sev))]
    fig, axes = plt.subplots(len(idx), len(cols), figsize=(1.45 * len(cols), 1.5 * len(idx)))
    with torch.no_grad():
        views = {None: (x, model(x).argmax(1))}
        for name, sev in CORRUPTIONS:
            xc = corrupt(x, name, sev, seed=0)
            views[(name, sev)] = (xc, model(xc).argmax(1))
    for r in range(len(idx)):
        for c, (title, key) in enumerate(cols):
            ax = axes[r, c]
            img, pred = views[key]
            if title == "true mask":
                ax.imshow(masks[r], cmap=cmap, vmin=0, vmax=k - 1, interpolation="nearest")
            elif title == "prediction":
                ax.imshow(pred[r], cmap=cmap, vmin=0, vmax=k - 1, interpolation="nearest")
            else:
                ax.imshow(img[r].permute(1, 2, 0).clamp(0, 1), interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            if r == 0:
                ax.set_title(title, fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
