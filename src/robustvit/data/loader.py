"""Feeding a device: chunks of data-set indices → float batches on the device, read ahead in worker processes.

What travels is uint8 where a data set holds 8-bit images (:meth:`~robustvit.data.base.ImageDataset.read_batch`):
pinned, copied to the device on a side CUDA stream one batch ahead, and made float in [0, 1] there, bit for bit
the values ``get_batch`` returns (:func:`float_images`). Float images (``ResizedDataset``'s) travel as float.

* :func:`resolve_workers`: ``"auto"`` = min(8, cores − 1) worker processes (0: read in the main process).
* :class:`ChunkLoader` / :func:`iter_chunks`: ``(x float on the device, y long on the CPU)`` per chunk, the chunks
  taken lazily (at most ``prefetch`` × workers ahead); persistent workers serve every pass over the data set.
* :class:`PartsDataset` / :meth:`ChunkLoader.iter_parts`: aligned data sets of the same images (the units of an
  ImageNet-C tree, the files of a -P root) read through one loader, part after part for each chunk.
* ``decode="gpu"``: JPEG files read as bytes in the workers, decoded (nvjpeg), resized and centre-cropped on the
  device as timm's evaluation transform does on the CPU; other files are decoded on the CPU.

>>> from robustvit.data import create_dataset
>>> ds = create_dataset("synthshapes:test:count=8:size=16")
>>> [tuple(x.shape) for x, y in iter_chunks(ds, iter([torch.arange(0, 5), torch.arange(5, 8)]))]
[(5, 3, 16, 16), (3, 3, 16, 16)]
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from robustvit.data.base import (UNREADABLE, FileImageDataset, ImageDataset, Resize, _read_items, _stack_images,
                                 load_image_uint8)
from robustvit.errors import RobustvitError

#: Most worker processes ``"auto"`` starts.
MAX_AUTO_WORKERS = 8
DECODERS = ("cpu", "gpu")
#: Interpolations the device resizes with for ``decode="gpu"`` (torch's; Pillow's box/hamming/lanczos have none).
GPU_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")


# ---------------------------------------------------------------- settings
def available_cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity`` where available: a job's share, not the node's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_workers(value: int | str | None) -> int:
    """Worker processes for ``--workers``: ``"auto"`` = min(8, cores − 1) (0 on one core), where cores are this
    process's share of :func:`available_cores` under ``torchrun`` (divided by ``LOCAL_WORLD_SIZE``); an integer
    ≥ 0 as given (0: read in the main process, on a background thread)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        try:
            local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            local = 1
        return max(0, min(MAX_AUTO_WORKERS, available_cores() // local - 1))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise RobustvitError(f"--workers must be auto or an integer >= 0, got {value!r}")


def check_decode(decode: str, device: torch.device | str, resize: Resize | None = None) -> None:
    """One-line refusals: an unknown ``decode``; ``"gpu"`` without CUDA or with an interpolation it lacks."""
    if decode not in DECODERS:
        raise RobustvitError(f"--decode must be cpu or gpu, got {decode!r}")
    if decode == "gpu":
        dev = torch.device(device)
        if dev.type != "cuda":
            raise RobustvitError(f"--decode gpu decodes JPEG files with nvjpeg on a CUDA device; this run uses "
                                 f"{dev.type}: use --decode cpu (the default)")
        if resize is not None and resize.interpolation not in GPU_INTERPOLATIONS:
            raise RobustvitError(f"--decode gpu resizes on the device with {', '.join(GPU_INTERPOLATIONS)}; this "
                                 f"model's preprocessing uses {resize.interpolation}: use --decode cpu")


# ---------------------------------------------------------------- uint8 → float on the device
_DIVISORS: dict[torch.device, torch.Tensor] = {}


def float_images(x: torch.Tensor) -> torch.Tensor:
    """Images as float32 in [0, 1] on their device: uint8 divided by 255 exactly as the CPU's ``to_float`` does.

    Not ``x.float().div_(255)`` on CUDA: with a Python number it multiplies by 1/255, which differs in the last
    bit for 126 of the 256 values; with a 0-dim float32 tensor divisor CPU and CUDA both divide exactly."""
    if x.dtype != torch.uint8:
        return x if x.dtype == torch.float32 else x.float()
    if x.device.type == "cpu":          # the CPU divides by a Python number exactly (two vectorised loops: faster)
        return x.float().div_(255)
    return divide_by_255(x)


def divide_by_255(x: torch.Tensor) -> torch.Tensor:
    """uint8 → float32 ``k / 255`` in one kernel on any device (the divisor: a 0-dim float32 tensor there)."""
    d = _DIVISORS.get(x.device)
    if d is None:
        d = _DIVISORS[x.device] = torch.tensor(255.0, dtype=torch.float32, device=x.device)
    return torch.div(x, d)


# ---------------------------------------------------------------- what the workers run
def _identity(batch: Any) -> Any:
    """The DataLoader's ``collate_fn`` (a module-level function: picklable for worker processes)."""
    return batch


class _Reader(Dataset):
    """The DataLoader's data set: a whole chunk per call (``__getitems__``), read by ``read(index tensor)`` (a
    picklable object, for worker processes started by spawn or forkserver too)."""

    def __init__(self, ds: ImageDataset, read: Callable[[torch.Tensor], Any]) -> None:
        self.ds, self.read = ds, read

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> Any:
        return self.read(torch.tensor([int(i)]))

    def __getitems__(self, ids: list[int]) -> Any:
        return self.read(torch.as_tensor(ids, dtype=torch.long))


class _ReadBatch:
    """``ds.read_batch``: uint8 where the data set has 8-bit images, else float."""

    def __init__(self, ds: ImageDataset) -> None:
        self.ds = ds

    def __call__(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.ds.read_batch(index)
        return x, torch.as_tensor(y).long()


class _Feed:
    """The DataLoader's ``batch_sampler``: each pass iterates the lazy iterable set for it (persistent workers
    need the same DataLoader re-iterated, so the chunks change under it)."""

    def __init__(self) -> None:
        self.source: Iterator[list[int]] = iter(())

    def __iter__(self) -> Iterator[list[int]]:
        return self.source


# ---------------------------------------------------------------- decode="gpu"
def file_view(ds: ImageDataset) -> tuple[FileImageDataset, torch.Tensor | None] | None:
    """The image-file data set behind ``ds`` and the map of ``ds``'s indices to its own (None: the same), or
    None when ``ds`` does not read image files (``decode="gpu"`` then decodes nothing)."""
    from robustvit.data.subset import SubsetDataset
    if isinstance(ds, FileImageDataset):
        return ds, None
    if isinstance(ds, SubsetDataset):
        inner = file_view(ds.ds)
        if inner is not None:
            return inner[0], ds.indices if inner[1] is None else inner[1][ds.indices]
    return None


def _jpeg_or_decoded(path: str, resize: Resize | None) -> torch.Tensor:
    """In a worker: a JPEG file's bytes (1-D uint8) for the device to decode, any other image decoded here as
    :func:`load_image_uint8` (3-D uint8); Pillow reads only the header to tell them apart and check the pixel limit."""
    from PIL import Image

    from robustvit.data.base import check_pixel_limit
    data = Path(path).read_bytes()
    with Image.open(BytesIO(data)) as im:
        check_pixel_limit(im, path)
        jpeg = im.format == "JPEG" and im.mode in ("RGB", "L")
    if jpeg:
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return load_image_uint8(BytesIO(data), resize)


class _ReadEncoded:
    """``decode="gpu"``, in a worker: (JPEG bytes or CPU-decoded images, labels, file indices) of a chunk."""

    def __init__(self, fds: FileImageDataset, indices: torch.Tensor | None) -> None:
        self.fds, self.indices = fds, indices

    def __call__(self, index: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        ids = index if self.indices is None else self.indices[index]
        items = _read_items(lambda i: self.fds.read_item(i, read=_jpeg_or_decoded), ids)
        return [x for x, _ in items], torch.tensor([y for _, y in items], dtype=torch.long), ids


def nvjpeg_decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """JPEG bytes → uint8 RGB (3, H, W) images on ``device`` (torchvision's batched nvjpeg decode on CUDA)."""
    from torchvision.io import ImageReadMode, decode_jpeg
    out = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    return list(out) if isinstance(out, (list, tuple)) else [out]


_NEAREST: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def _pil_nearest(n_in: int, n_out: int, device: torch.device) -> torch.Tensor:
    """The source rows (or columns) of Pillow's NEAREST resize from ``n_in`` to ``n_out``: the coordinate summed
    step by step in double from the first pixel's centre and truncated, as Pillow's loop does (torch's nearest
    modes round some the other way)."""
    key = (n_in, n_out, device)
    if key not in _NEAREST:
        step, at, out = n_in / n_out, n_in / n_out * 0.5, []
        for _ in range(n_out):
            out.append(min(n_in - 1, int(at)))
            at += step
        _NEAREST[key] = torch.tensor(out, dtype=torch.long).to(device)
    return _NEAREST[key]


class DeviceJpegDecoder:
    """The device half of ``decode="gpu"``: JPEG bytes decoded on the device by ``decode`` (default
    :func:`nvjpeg_decode`; tests pass a CPU decoder), then timm's evaluation transform there: the shorter side
    resized to ``floor(size / crop_pct)`` (antialiased, rounded to uint8), the centre ``size`` × ``size`` cropped.
    Images the workers decoded are copied as they are; a batch nvjpeg refuses is decoded image by image, an image
    it refuses alone by Pillow (unreadable: as on the CPU path)."""

    def __init__(self, fds: FileImageDataset, device: torch.device,
                 decode: Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]] | None = None) -> None:
        self.fds, self.device, self.resize = fds, torch.device(device), fds.resize
        self.decode = decode or nvjpeg_decode

    def fit(self, img: torch.Tensor) -> torch.Tensor:
        """uint8 (3, h, w) → the model's input (uint8 (3, size, size)); as it is without a ``resize``."""
        if self.resize is None:
            return img
        import torchvision.transforms.v2.functional as F2
        from torchvision.transforms import InterpolationMode

        r = self.resize
        short = math.floor(r.size / r.crop_pct)
        if r.interpolation == "nearest":
            h, w = img.shape[-2:]
            oh, ow = (int(short * h / w), short) if w <= h else (short, int(short * w / h))   # torchvision's sizes
            rows, cols = _pil_nearest(h, oh, img.device), _pil_nearest(w, ow, img.device)
            img = img.index_select(-2, rows).index_select(-1, cols)
        else:
            mode = InterpolationMode.BILINEAR if r.interpolation == "bilinear" else InterpolationMode.BICUBIC
            img = F2.resize(img, [short], interpolation=mode, antialias=True)
        return F2.center_crop(img, [r.size, r.size])

    def fit_all(self, imgs: list[torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`fit` of every image, those of one size together (per image the host can't keep up with the device)."""
        out: list[torch.Tensor | None] = [None] * len(imgs)
        sizes: dict[tuple[int, ...], list[int]] = {}
        for k, im in enumerate(imgs):
            sizes.setdefault(tuple(im.shape), []).append(k)
        for ks in sizes.values():
            for k, im in zip(ks, self.fit(torch.stack([imgs[k] for k in ks]))):
                out[k] = im
        return out                                                           # type: ignore[return-value]

    def _decode_each(self, data: list[torch.Tensor], ids: list[int]) -> tuple[list[torch.Tensor], list[bool]]:
        """Images ``data`` of files ``ids`` decoded one by one, and whether each was readable."""
        out, ok = [], []
        for d, i in zip(data, ids):
            try:
                img, good = self.fit(self.decode([d], self.device)[0]), True
            except Exception:  # noqa: BLE001  nvjpeg refuses it: Pillow decides (maybe unreadable, as on the CPU)
                try:
                    img, good = load_image_uint8(BytesIO(d.numpy().tobytes()), self.resize).to(self.device), True
                except Exception as e:  # noqa: BLE001
                    img, good = self.fds.unreadable(self.fds.samples[i][0], e).to(self.device), False
            out.append(img)
            ok.append(good)
        return out, ok

    def __call__(self, batch: tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        items, y, ids = batch
        out = list(items)
        enc = [k for k, t in enumerate(items) if t.ndim == 1]
        if enc:
            data = [items[k] for k in enc]
            try:
                imgs, ok = self.fit_all(self.decode(data, self.device)), [True] * len(enc)
            except Exception:  # noqa: BLE001  one bad file fails nvjpeg's whole batch: one at a time
                imgs, ok = self._decode_each(data, [int(ids[k]) for k in enc])
            if not all(ok):
                y = y.clone()
            for k, im, good in zip(enc, imgs, ok):
                out[k] = im
                if not good:
                    y[k] = UNREADABLE
        out = [t.to(self.device, non_blocking=True) for t in out]       # the decoded ones are there already
        return _stack_images(out, self.fds.spec), y


# ---------------------------------------------------------------- the loader
_END = object()


def _one_line(e: BaseException) -> RobustvitError:
    """A RobustvitError raised in a worker comes back with the worker's traceback in its message: its last line."""
    text = str(e).strip()
    if "\n" in text:
        text = text.splitlines()[-1]
        for prefix in ("robustvit.errors.RobustvitError: ", "RobustvitError: "):
            text = text[len(prefix):] if text.startswith(prefix) else text
    return RobustvitError(text)


class ChunkLoader:
    """Reads chunks of ``dataset`` (1-D index tensors) for ``device``; see the module docstring.

    ``workers`` (an int, or ``"auto"``: :func:`resolve_workers`): 0 reads in this process on one background thread
    (files on :data:`~robustvit.data.base.READ_THREADS` threads), ``prefetch`` chunks ahead (0: none); N > 0
    starts N persistent worker processes, ``prefetch`` chunks ahead each, at the first pass, kept until
    :meth:`close` (use it as a context manager). One pass (:meth:`iter`, :meth:`iter_parts`) at a time."""

    def __init__(self, dataset: ImageDataset, *, workers: int | str = 0, device: torch.device | str = "cpu",
                 decode: str = "cpu", prefetch: int = 2,
                 gpu_decode: Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]] | None = None) -> None:
        self.dataset, self.workers = dataset, resolve_workers(workers)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None and torch.cuda.is_available():
            self.device = torch.device("cuda", torch.cuda.current_device())
        if prefetch < 0:
            raise RobustvitError(f"prefetch must be >= 0, got {prefetch}")
        self.prefetch, self.decode = int(prefetch), decode
        view = file_view(dataset) if decode == "gpu" else None
        if gpu_decode is None:          # gpu_decode: a stand-in decoder (tests on the CPU) skips the CUDA check
            check_decode(decode, self.device, view[0].resize if view is not None else None)
        elif decode not in DECODERS:
            check_decode(decode, self.device)
        if decode == "gpu" and view is None:
            warnings.warn(f"--decode gpu decodes image files; {dataset.spec or type(dataset).__name__} is not read "
                          "from image files and is read as usual", stacklevel=2)
        self.jpeg = None if view is None else DeviceJpegDecoder(view[0], self.device, gpu_decode)
        self._reader = _Reader(dataset, _ReadBatch(dataset) if view is None else _ReadEncoded(*view))
        self._pinned = self.device.type == "cuda"
        self._loader: DataLoader | None = None
        self._feed = _Feed()
        self._pool: ThreadPoolExecutor | None = None
        self._pass = 0

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the worker processes (and the background thread)."""
        it = getattr(self._loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self._loader = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ChunkLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    # ------------------------------------------------------------ passes
    def iter(self, chunks: Iterable[Any], *, tagged: bool = False, as_float: bool = True) -> Iterator[Any]:
        """``(x, y)`` for each chunk of ``chunks`` (1-D index tensors, or with ``tagged`` ``(tag, indices)`` pairs,
        giving ``(tag, x, y)``): ``x`` float (n, 3, H, W) in [0, 1] on the device (``as_float=False``: as it
        travelled, uint8 or float; :func:`float_images` converts it), ``y`` long labels on the CPU
        (:data:`~robustvit.data.base.UNREADABLE` for unreadable files, whose image is zeros)."""
        self._pass += 1
        token = self._pass
        items = iter(chunks) if tagged else ((None, ids) for ids in chunks)
        for tag, x, y in self._device(self._host(items, token), as_float):
            self._check(token)
            yield (tag, x, y) if tagged else (x, y)
        self._check(token)              # a pass cut short by a newer one must not look finished

    def iter_parts(self, chunks: Iterable[tuple[Any, torch.Tensor] | tuple[Any, torch.Tensor, Sequence[str] | None]],
                   *, as_float: bool = True) -> Iterator[tuple[Any, ChunkParts]]:
        """For a :class:`PartsDataset`: ``(tag, parts)`` for each ``(tag, indices[, names])`` of ``chunks``, where
        ``parts.get(name)`` gives that part's ``(x, y)`` for the chunk's indices (as :meth:`iter`). The parts are
        read in order, ``names`` of them (None or left out: all); ``get`` may skip parts, never go back. A chunk's
        parts not taken are read and dropped when the next chunk is asked for."""
        pds = self.dataset
        if not isinstance(pds, PartsDataset):
            raise RobustvitError("iter_parts reads a PartsDataset (aligned data sets, one per part)")
        descr: deque[tuple[Any, list[str]]] = deque()

        def flat() -> Iterator[tuple[str, torch.Tensor]]:
            for item in chunks:
                tag, ids = item[0], item[1]
                names = list(pds.names if len(item) < 3 or item[2] is None else item[2])   # type: ignore[misc]
                unknown = [n for n in names if n not in pds.offsets]
                if unknown:
                    raise RobustvitError(f"no part {unknown[0]!r} among {', '.join(pds.names)}")
                descr.append((tag, names))
                for name in names:
                    yield (tag, name), pds.flat(name, ids)

        stream = _Peek(self.iter(flat(), tagged=True, as_float=as_float))
        while True:
            if not descr and stream.peek() is _END:
                return
            tag, names = descr.popleft()
            parts = ChunkParts(names, stream)
            yield tag, parts
            parts.drain()

    # ------------------------------------------------------------ host side: indices → CPU batches
    def _host(self, items: Iterator[tuple[Any, torch.Tensor]], token: int) -> Iterator[tuple[Any, Any]]:
        source = self._host_workers(items) if self.workers > 0 else self._host_thread(items)
        for out in source:
            self._check(token)
            yield out

    def _check(self, token: int) -> None:
        if token != self._pass:
            raise RobustvitError("a ChunkLoader reads one pass at a time; this pass was superseded by a newer one")

    def _read_here(self, ids: torch.Tensor) -> Any:
        batch = self._reader.__getitems__(ids.tolist())
        return _pin(batch) if self._pinned else batch

    def _host_thread(self, items: Iterator[tuple[Any, torch.Tensor]]) -> Iterator[tuple[Any, Any]]:
        if self.prefetch == 0:
            for tag, ids in items:
                yield tag, self._read_here(ids)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="robustvit-loader")
        pending: deque[tuple[Any, Any]] = deque()

        def submit() -> None:
            nxt = next(items, _END)                 # chunks are taken here, in the consumer's thread
            if nxt is not _END:
                tag, ids = nxt
                pending.append((tag, self._pool.submit(self._read_here, ids)))   # type: ignore[union-attr]

        for _ in range(self.prefetch):
            submit()
        while pending:
            tag, fut = pending.popleft()
            batch = fut.result()
            submit()
            yield tag, batch

    def _host_workers(self, items: Iterator[tuple[Any, torch.Tensor]]) -> Iterator[tuple[Any, Any]]:
        tags: deque[Any] = deque()

        def indices() -> Iterator[list[int]]:
            for tag, ids in items:
                tags.append(tag)
                yield torch.as_tensor(ids).reshape(-1).tolist()

        if self._loader is None:
            self._loader = DataLoader(self._reader, batch_sampler=self._feed, num_workers=self.workers,
                                      collate_fn=_identity, pin_memory=self._pinned, persistent_workers=True,
                                      prefetch_factor=max(1, self.prefetch))
        self._feed.source = indices()
        try:
            for batch in self._loader:
                yield tags.popleft(), batch
        except RobustvitError as e:
            raise _one_line(e) from None

    # ------------------------------------------------------------ device side: CPU batches → device batches
    def _device(self, host: Iterator[tuple[Any, Any]], as_float: bool
                ) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(self.device) if cuda else None

        def start(tag: Any, batch: Any) -> tuple[Any, Any, Any]:
            if self.jpeg is not None:
                return tag, batch, None
            x, y = batch
            with torch.cuda.stream(stream):
                x = x.to(self.device, non_blocking=True)
                done = torch.cuda.Event()
                done.record(stream)
            return tag, (x, y), done

        def finish(tag: Any, batch: Any, done: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
            if self.jpeg is not None:
                x, y = self.jpeg(batch)
            else:
                x, y = batch
                if done is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(done)
                    x.record_stream(current)
                elif x.device != self.device:
                    x = x.to(self.device)
            return tag, float_images(x) if as_float else x, y

        if not cuda:                    # nothing to overlap: no batch held back
            for tag, batch in host:
                yield finish(tag, batch, None)
            return
        ahead = None
        for tag, batch in host:
            nxt = start(tag, batch)
            if ahead is not None:
                yield finish(*ahead)
            ahead = nxt
        if ahead is not None:
            yield finish(*ahead)


def _pin(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, (list, tuple)):
        return type(batch)(_pin(b) for b in batch)
    return batch


class _Peek:
    def __init__(self, it: Iterator[Any]) -> None:
        self.it, self.buf = it, _END

    def peek(self) -> Any:
        if self.buf is _END:
            self.buf = next(self.it, _END)
        return self.buf

    def pop(self) -> Any:
        out = self.peek()
        self.buf = _END
        if out is _END:
            raise RobustvitError("the part stream ended early")
        return out


def iter_chunks(dataset: ImageDataset, chunks: Iterable[torch.Tensor], *, workers: int | str = 0,
                device: torch.device | str = "cpu", decode: str = "cpu", prefetch: int = 2
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One pass of a :class:`ChunkLoader` (workers stop at the end): ``(x, y)`` for each index tensor of ``chunks``."""
    with ChunkLoader(dataset, workers=workers, device=device, decode=decode, prefetch=prefetch) as loader:
        yield from loader.iter(chunks)


# ---------------------------------------------------------------- several aligned data sets, one loader
class PartsDataset(ImageDataset):
    """Data sets of the same images, one per part (``{"fog/3": unit, …}``), as one for a :class:`ChunkLoader`:
    flat item ``offsets[name] + i`` is image ``i`` of part ``name``. Each read stays within one part, so parts
    may differ in image size (CIFAR-C's 32-px units next to the run's 224-px clean images) and in length."""

    def __init__(self, parts: Mapping[str, ImageDataset]) -> None:
        if not parts:
            raise RobustvitError("a PartsDataset needs at least one part")
        self.names = list(parts)
        self.parts = [parts[n] for n in self.names]
        ends = list(itertools.accumulate(len(p) for p in self.parts))
        self.offsets = dict(zip(self.names, [0, *ends[:-1]]))
        self._ends, self.total = torch.tensor(ends), ends[-1]
        self.classes = list(self.parts[0].classes)
        self.spec = f"parts {self.names[0]}…{self.names[-1]}" if len(self.names) > 1 else f"part {self.names[0]}"

    def __len__(self) -> int:
        return self.total

    def flat(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """The flat indices of images ``ids`` of part ``name``."""
        return torch.as_tensor(ids).long().reshape(-1) + self.offsets[name]

    def _split(self, index: torch.Tensor) -> tuple[ImageDataset, torch.Tensor]:
        idx = torch.as_tensor(index).long().reshape(-1)
        k = torch.searchsorted(self._ends, idx, right=True)
        if not len(idx) or bool((k != k[0]).any()) or int(k[0]) >= len(self.parts) or int(idx.min()) < 0:
            raise RobustvitError("a read of a PartsDataset must lie within one part")
        part = int(k[0])
        return self.parts[part], idx - self.offsets[self.names[part]]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        ds, local = self._split(torch.tensor([int(i)]))
        return ds[int(local[0])]

    def get_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ds, local = self._split(index)
        return ds.get_batch(local)

    def read_batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ds, local = self._split(index)
        return ds.read_batch(local)


class ChunkParts:
    """The parts of one chunk (:meth:`ChunkLoader.iter_parts`), read in order: ``get(name) → (x, y)``."""

    def __init__(self, names: list[str], stream: _Peek) -> None:
        self.names, self._stream, self._next = names, stream, 0

    def get(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Part ``name``'s images of this chunk (earlier parts not taken are dropped)."""
        if name not in self.names[self._next:]:
            raise RobustvitError(f"part {name!r} is not read for this chunk or was passed already; parts come in the "
                                 f"order {', '.join(self.names)}")
        while True:
            (_, got), x, y = self._stream.pop()
            self._next += 1
            if got == name:
                return x, y

    def drain(self) -> None:
        while self._next < len(self.names):
            self._stream.pop()
            self._next += 1


def iter_parts(parts: Mapping[str, ImageDataset] | PartsDataset,
               chunks: Iterable[tuple[Any, torch.Tensor] | tuple[Any, torch.Tensor, Sequence[str] | None]], *,
               workers: int | str = 0, device: torch.device | str = "cpu", prefetch: int = 2, as_float: bool = True
               ) -> Iterator[tuple[Any, ChunkParts]]:
    """One pass of :meth:`ChunkLoader.iter_parts` over ``parts`` (a mapping name → data set, or a PartsDataset)."""
    pds = parts if isinstance(parts, PartsDataset) else PartsDataset(parts)
    with ChunkLoader(pds, workers=workers, device=device, prefetch=prefetch) as loader:
        yield from loader.iter_parts(chunks, as_float=as_float)


__all__ = ["ChunkLoader", "ChunkParts", "DECODERS", "DeviceJpegDecoder", "MAX_AUTO_WORKERS", "PartsDataset",
           "available_cores", "check_decode", "divide_by_255", "file_view", "float_images", "iter_chunks", "iter_parts",
           "nvjpeg_decode", "resolve_workers"]
