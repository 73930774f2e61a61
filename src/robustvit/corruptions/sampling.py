"""Random draws for the corruptions, made on the generator's device and moved to the images' device.

:func:`poisson` runs ``torch.poisson`` on several CPU threads: torch's CPU Poisson sampler is serial (one
generator, one value at a time) and dominated shot noise's time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch


#: values per CPU chunk of :func:`poisson`: a 64 × 3 × 224 × 224 batch makes 10 chunks
POISSON_CHUNK = 1 << 20


def randn(shape: tuple[int, ...], g: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Standard normal values of ``like``'s dtype, drawn from ``g`` and moved to ``like``'s device."""
    if g.device == like.device:
        return torch.randn(shape, generator=g, out=torch.empty(shape, dtype=like.dtype, device=like.device))
    return torch.randn(shape, generator=g, device=g.device, dtype=like.dtype).to(like.device)


def rand(shape: tuple[int, ...], g: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Uniform [0, 1) values of ``like``'s dtype, drawn from ``g`` and moved to ``like``'s device."""
    if g.device == like.device:
        return torch.rand(shape, generator=g, out=torch.empty(shape, dtype=like.dtype, device=like.device))
    return torch.rand(shape, generator=g, device=g.device, dtype=like.dtype).to(like.device)


def poisson(rate: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Poisson counts with the given rates (float, on ``g``'s device), like ``torch.poisson(rate, generator=g)``.
    On the CPU, more than :data:`POISSON_CHUNK` values are drawn in chunks of that size, each from its own
    generator seeded from ``g``, on ``torch.get_num_threads()`` threads (torch's sampler releases the GIL);
    the result depends on ``g``'s state and the shape only."""
    if rate.device.type != "cpu" or rate.numel() <= POISSON_CHUNK:
        return torch.poisson(rate, generator=g)
    flat = rate.contiguous().view(-1)
    out = torch.empty_like(flat)
    starts = range(0, flat.numel(), POISSON_CHUNK)
    seeds = torch.randint(0, 2**62, (len(starts),), generator=g, device=g.device).tolist()

    def draw(job: tuple[int, int]) -> None:
        start, seed = job
        part = slice(start, start + POISSON_CHUNK)
        out[part] = torch.poisson(flat[part], generator=torch.Generator().manual_seed(seed))

    with ThreadPoolExecutor(max(1, min(torch.get_num_threads(), len(seeds)))) as pool:
        list(pool.map(draw, zip(starts, seeds)))
    return out.view(rate.shape)
