"""model-vs-human's power equalisation and false colour generated on the fly, against closed forms: a spectrum
with the non-DC amplitudes halved halves the contrast around the mean; opponent colours negate both chromatic DKL
axes and keep luminance. Tables are synthetic (the reference's files are the user's copy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustvit.data.mvh_conditions import (CONES, CONES_WHITE, DKL, GAMMA_FILE, SPECTRUM_FILE, apply_condition,
                                           greyscale, load_tables, power_equalisation)
from robustvit.errors import RobustvitError
from robustvit.evaluation.suites import create_suite


def _tables(folder, side: int = 16, gamma=None):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / SPECTRUM_FILE, np.ones((side, side)))
    np.save(folder / GAMMA_FILE, (np.arange(256) / 255.0) ** 2.2 if gamma is None else gamma)
    return folder


def test_power_equalisation_keeps_phases_and_takes_the_given_amplitudes():
    g = torch.Generator().manual_seed(0)
    x = 0.3 + 0.4 * torch.rand(3, 3, 16, 12, generator=g, dtype=torch.float64)
    grey = greyscale(x)[:, :1]
    amp = torch.fft.fftshift(torch.fft.fft2(grey[0, 0]), dim=(-2, -1)).abs()
    assert torch.allclose(power_equalisation(x[:1], amp), grey[:1].expand(-1, 3, -1, -1), atol=1e-12)
    half = amp * 0.5
    half[8, 6] = amp[8, 6]                                   # the centred DC term kept
    m = grey[0, 0].mean()
    assert torch.allclose(power_equalisation(x[:1], half)[0, 1], m + 0.5 * (grey[0, 0] - m), atol=1e-12)
    with pytest.raises(RobustvitError, match="run at 12 px"):
        power_equalisation(x, torch.ones(12, 12))


def test_false_colour_negates_the_chromatic_dkl_axes(tmp_path):
    t = load_tables(_tables(tmp_path))
    g = torch.Generator().manual_seed(1)
    x = (torch.randint(110, 150, (2, 3, 8, 8), generator=g) / 255).double()   # near grey: inside the gamut
    y = apply_condition(x, "false-colour", "False", tables=t)
    assert torch.equal(apply_condition(x, "false-colour", "True", tables=t), x)
    assert torch.equal((y * 255).round(), y * 255)                          # 8-bit levels
    m, n = torch.tensor(CONES, dtype=torch.float64), torch.tensor(DKL, dtype=torch.float64)
    white = torch.tensor(CONES_WHITE, dtype=torch.float64).view(1, 3, 1, 1)

    def dkl(v):
        lin = t.gamma[(v * 255).round().long()]
        return torch.einsum("ij,njhw->nihw", n, torch.einsum("ij,njhw->nihw", m, lin) - white)

    a, b = dkl(x), dkl(y)
    assert (a[:, 1:].abs().amax(dim=(0, 2, 3)) > 0.1).all()                  # real contrast on both chromatic axes
    assert torch.allclose(b[:, 0], a[:, 0], atol=0.02) and torch.allclose(b[:, 1:], -a[:, 1:], atol=0.01)


def test_tables_are_checked_and_needed(tmp_path):
    x = torch.rand(1, 3, 16, 16)
    with pytest.raises(RobustvitError, match="tables=DIR"):
        apply_condition(x, "power-equalisation", "pow")
    with pytest.raises(RobustvitError, match="is missing"):
        load_tables(tmp_path / "none")
    with pytest.raises(RobustvitError, match="256 increasing"):
        load_tables(_tables(tmp_path / "bad", gamma=np.zeros(256)))
    with pytest.raises(RobustvitError, match="tables=DIR"):
        create_suite("model_vs_human:datasets=false-colour")
    assert "power-equalisation" not in create_suite("model_vs_human")._names()
    s = create_suite(f"model_vs_human:tables={_tables(tmp_path / 't')}")
    assert {"power-equalisation", "false-colour"} <= set(s._names())
    assert torch.allclose(apply_condition(x, "power-equalisation", "0", tables=s.tables), greyscale(x))
