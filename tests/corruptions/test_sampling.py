"""The threaded CPU Poisson sampler: deterministic, independent of the thread count, and Poisson."""

from __future__ import annotations

import torch

from robustvit.corruptions import sampling


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_small_tensors_are_torch_poisson():
    rate = torch.rand(4, 3, 8, 8) * 20
    assert torch.equal(sampling.poisson(rate, _gen(1)), torch.poisson(rate, generator=_gen(1)))


def test_chunked_draws_are_deterministic_and_thread_count_free(monkeypatch):
    monkeypatch.setattr(sampling, "POISSON_CHUNK", 1000)
    rate = torch.rand(2, 3, 40, 40) * 30                      # 9,600 values: 10 chunks
    a = sampling.poisson(rate, _gen(5))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        b = sampling.poisson(rate, _gen(5))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(a, b)
    assert not torch.equal(a, sampling.poisson(rate, _gen(6)))
    assert a.shape == rate.shape and a.dtype == rate.dtype
    assert torch.equal(a, a.round()) and float(a.min()) >= 0


def test_chunked_draws_have_poisson_moments(monkeypatch):
    monkeypatch.setattr(sampling, "POISSON_CHUNK", 4096)
    for lam in (0.7, 7.5, 45.0):                              # the sampler's small- and large-rate branches
        k = sampling.poisson(torch.full((200_000,), lam), _gen(2))
        assert abs(float(k.mean()) - lam) < 4 * (lam / k.numel()) ** 0.5 + 1e-3
        assert abs(float(k.var()) / lam - 1) < 0.03
        # chunks are independent streams, not one stream repeated
        assert not torch.equal(k[:4096], k[4096:8192])


def test_in_place_noise_corruptions_match_their_formulas():
    """The noise corruptions work in place on recycled draws; the values are the textbook formulas."""
    from robustvit.corruptions import corrupt, corruption_params

    x = torch.rand(6, 3, 256, 256, generator=_gen(0))          # 4.7 MB: the recycled-buffer path
    c = corruption_params("gaussian_noise", 3, "imagenet").c
    expected = (x + c * torch.randn(x.shape, generator=_gen(9))).clamp(0, 1)
    assert torch.equal(corrupt(x, "gaussian_noise", 3, generator=_gen(9)), expected)
    c = corruption_params("impulse_noise", 2, "imagenet").c
    u = torch.rand((2, *x.shape), generator=_gen(9))
    expected = torch.where(u[0] < c, (u[1] < 0.5).float(), x)
    assert torch.equal(corrupt(x, "impulse_noise", 2, generator=_gen(9)), expected)
    c = corruption_params("speckle_noise", 4, "imagenet").c
    expected = (x + x * c * torch.randn(x.shape, generator=_gen(9))).clamp(0, 1)
    torch.testing.assert_close(corrupt(x, "speckle_noise", 4, generator=_gen(9)), expected, atol=1e-6, rtol=0)
