"""Cost of the wrapper's [0, 1] input check per attack step.

``Normalized`` refuses inputs outside [0, 1] (see ``robustvit.models.wrapper``). This times PGD steps — one
forward and one backward through the wrapped model, the step update and the projection, as
``robustvit.attacks.PGD`` does them — with the check on (``model.check_range = True``, the default) and off,
interleaved (on/off, then off/on, …) so that both see the same machine load, and reports the median per step
over ``--repeats`` rounds of ``--steps`` steps, the median of the paired per-round differences (the overhead per
step; on a shared machine its noise can exceed the check itself), and the check alone (``aminmax`` of the batch
and the read of its two values) as a micro-benchmark, the direct cost. On CUDA the check is read every ``check_every`` calls
(no synchronisation in between); the script then synchronises once per round.

    PYTHONPATH=src python benchmarks/input_check.py --model vit_cifar_micro --batch-size 64 --repeats 15
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from robustvit.models import create_model


def pgd_steps(model, x: torch.Tensor, y: torch.Tensor, steps: int, eps: float = 4 / 255) -> torch.Tensor:
    """``steps`` L∞ PGD steps (step ε/4), as the attack's loop: forward, backward, sign step, projection."""
    lo, hi = (x - eps).clamp(min=0), (x + eps).clamp(max=1)
    x_adv = x.clone()
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), y)
        g, = torch.autograd.grad(loss, x_adv)
        x_adv = (x_adv.detach() + eps / 4 * g.sign()).clamp(lo, hi)
    return x_adv


def time_round(model, x, y, steps: int, check: bool, device: torch.device) -> float:
    model.check_range = check
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    pgd_steps(model, x, y, steps)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def time_check_alone(x: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(100):
            lo, hi = torch.aminmax(x)
            float(lo), float(hi)
        times.append((time.perf_counter() - t0) / 100)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_cifar_micro")
    ap.add_argument("--img-size", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(0)
    model = create_model(a.model, num_classes=10, img_size=a.img_size).to(device).eval()
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(a.batch_size, 3, a.img_size, a.img_size, generator=g, device=device)
    y = torch.randint(0, 10, (a.batch_size,), generator=g, device=device)
    for check in (True, False):                       # warm-up
        time_round(model, x, y, 2, check, device)
    on, off = [], []
    for r in range(a.repeats):
        for check in ((True, False) if r % 2 == 0 else (False, True)):
            (on if check else off).append(time_round(model, x, y, a.steps, check, device))
    m_on, m_off = statistics.median(on), statistics.median(off)
    paired = statistics.median(u - v for u, v in zip(on, off))
    alone = time_check_alone(x, a.repeats) if device.type == "cpu" else float("nan")
    print(f"{device.type}: {a.model} {a.img_size}px, batch {a.batch_size}, {a.steps} PGD steps x {a.repeats} rounds "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"  ms/step, check on   {1e3 * m_on:9.3f}")
    print(f"  ms/step, check off  {1e3 * m_off:9.3f}")
    print(f"  overhead per step   {1e3 * paired:+9.3f} ms ({100 * paired / m_off:+.2f} %), median of paired differences")
    print(f"  check alone         {1e3 * alone:9.3f} ms ({100 * alone / m_off:.2f} % of a step)")


if __name__ == "__main__":
    main()
