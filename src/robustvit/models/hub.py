"""Pretrained weights without the network: fail in seconds, not after the hub's retries.

Without a network the Hugging Face hub retries for about a minute, then raises its raw error. :func:`offline_guard`
probes the hub first (a short TCP connection; ``HF_HUB_OFFLINE`` set counts as no network): when unreachable, weights
come from the cache only and a missing file is one line naming ``--weights`` and ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from robustvit.errors import RobustvitError

#: Seconds the connection probe waits for the hub.
PROBE_TIMEOUT = 3.0
_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_reachable(timeout: float = PROBE_TIMEOUT) -> bool:
    """False when ``HF_HUB_OFFLINE`` is set or the hub's host (``HF_ENDPOINT``, default huggingface.co) takes no
    TCP connection within ``timeout`` seconds; True behind a proxy (the proxy decides)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(p) for p in _PROXIES):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def _hub_offline() -> Iterator[None]:
    """The hub's offline mode (cache only) for the duration, as ``HF_HUB_OFFLINE=1`` at start-up."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    patched = [(m, m.HF_HUB_OFFLINE) for name, m in list(sys.modules.items())
               if name.startswith("huggingface_hub") and isinstance(getattr(m, "HF_HUB_OFFLINE", None), bool)]
    for m, _ in patched:
        m.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for m, value in patched:
            m.HF_HUB_OFFLINE = value
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


@contextmanager
def offline_guard(name: str) -> Iterator[None]:
    """Around loading ``name``'s pretrained weights: without the hub, the cache only, and a one-line error when the
    weights are not there."""
    if hub_reachable():
        yield
        return
    import huggingface_hub  # noqa: F401  (its modules must be loaded to switch them to offline mode)

    try:
        with _hub_offline():
            yield
    except RobustvitError:
        raise
    except Exception as e:
        raise RobustvitError(
            f"the pretrained weights of {name} are not in the Hugging Face cache and the hub cannot be reached "
            f"({type(e).__name__}); give --weights FILE (a .safetensors/.pth state dict), or download them once "
            "with network (then HF_HUB_OFFLINE=1 uses the cache)") from None


__all__ = ["hub_reachable", "offline_guard"]
