"""Cost of adversarial training steps relative to a standard step, and training throughput.

For one model and one batch, times a full optimizer step (forward, backward, AdamW step) with the ``ce``,
``fgsm_rs`` and ``pgd_at`` (K steps) losses; reports the median over ``--repeats`` (after warm-up) and the
ratio to the ``ce`` step. Ideal ratios: 2 for FGSM-RS (one extra forward/backward) and K + 1 for PGD-K. The
adversarial losses also run one gradient-free forward on the clean images (for the training-accuracy log), so
expect about +⅓ on top of the ideal. Then training images/s with ``ce`` on CPU and, when present, CUDA
(bf16 autocast, channels_last).

    PYTHONPATH=src python benchmarks/training.py --model vit_cifar_micro --batch-size 64 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from robustvit.models import create_model
from robustvit.training import create_loss


def time_step(model, loss_fn, x, y, opt, repeats: int, device: torch.device, amp: bool) -> float:
    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss, _, _ = loss_fn(model, x, y, 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(device: torch.device, args: argparse.Namespace) -> None:
    amp = device.type == "cuda"
    torch.manual_seed(0)
    model = create_model(args.model, num_classes=10).to(device).train()
    if amp:
        model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.rand(args.batch_size, *model.spec.input_size, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    losses = [("ce", {}), ("fgsm_rs", {"eps": "4/255"})] + [("pgd_at", {"eps": "4/255", "attack_steps": k})
                                                           for k in args.pgd_steps]
    base = None
    print(f"\n{device.type}: {args.model}, batch {args.batch_size}, median of {args.repeats} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"{'loss':<14}{'ms/step':>10}{'ratio':>8}{'ideal':>7}{'images/s':>10}")
    for name, opts in losses:
        t = time_step(model, create_loss(name, **opts), x, y, opt, args.repeats, device, amp)
        base = base or t
        ideal = {"ce": 1, "fgsm_rs": 2}.get(name, opts.get("attack_steps", 0) + 1)
        label = name + (f"-{opts['attack_steps']}" if "attack_steps" in opts else "")
        print(f"{label:<14}{1000 * t:>10.1f}{t / base:>8.2f}{ideal:>7}{args.batch_size / t:>10.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_cifar_micro")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--pgd-steps", type=int, nargs="+", default=[2, 5])
    args = p.parse_args()
    bench(torch.device("cpu"), args)
    if torch.cuda.is_available():
        bench(torch.device("cuda"), args)


if __name__ == "__main__":
    main()
