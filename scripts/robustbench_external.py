"""Turn a ``save=all`` export into RobustBench's external-evaluation format: one ``.pt`` file holding the
adversarial images of the whole test set as a float tensor (N, 3, H, W) in [0, 1], in the test set's order
(RobustBench's "New external evaluation(s)" issue template; its issues #199/#200).

    robustvit eval --model M --data cifar10:test --suite autoattack:save=all --out OUT
    python scripts/robustbench_external.py OUT/adversarial/autoattack_save=all/x_adv.safetensors adv.pt --num-images 10000

The export must cover every image of the test set (``indices`` = 0 … N − 1): a run with ``--limit`` is refused.
A ``save_dtype=uint8`` export is divided by 255 (the values a PNG of it holds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def to_robustbench(x_adv_file: str | Path, num_images: int) -> torch.Tensor:
    """The float32 (N, 3, H, W) tensor RobustBench takes, from ``x_adv.safetensors``; ValueError (one line) when
    its images are not the test set's N, in order."""
    from safetensors.torch import load_file

    t = load_file(str(x_adv_file))
    x, idx = t["x_adv"], t["indices"]
    if idx.numel() != num_images or not torch.equal(idx, torch.arange(num_images, dtype=idx.dtype)):
        raise ValueError(f"{x_adv_file} holds {idx.numel()} images, not the test set's {num_images} in order; "
                         "re-run the suite on the whole test set (no --limit)")
    return (x.float() / 255) if x.dtype == torch.uint8 else x.float()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("x_adv", help="OUT/adversarial/<suite key>/x_adv.safetensors")
    ap.add_argument("out", help="the .pt file to write")
    ap.add_argument("--num-images", type=int, default=10000, help="the test set's size (CIFAR-10/100: 10000)")
    args = ap.parse_args(argv)
    try:
        x = to_robustbench(args.x_adv, args.num_images)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.save(x, args.out)
    print(f"wrote {args.out}: {tuple(x.shape)} float32 in [{x.min():.3f}, {x.max():.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
