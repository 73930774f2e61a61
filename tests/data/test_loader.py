"""robustvit.data.loader: uint8 transport with the same float values as get_batch, lazy chunks, workers, parts,
and decode="gpu" (its logic with a CPU decoder in nvjpeg's place; nvjpeg itself in the gpu-marked tests)."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
import torch
from PIL import Image

from robustvit.data import UNREADABLE, create_dataset
from robustvit.data.base import FileImageDataset, ImageDataset, Resize, ResizedDataset, TensorImageDataset, to_float
from robustvit.data.corrupted import open_corrupted
from robustvit.data.loader import (ChunkLoader, DeviceJpegDecoder, PartsDataset, check_decode, divide_by_255,
                                   float_images, iter_chunks, iter_parts, resolve_workers)
from robustvit.data.perturbed import NpySequences, SequenceDataset
from robustvit.data.subset import SubsetDataset
from robustvit.errors import RobustvitError


# ---------------------------------------------------------------- fixtures
def _jpeg_folder(root, sizes=((60, 80), (90, 50), (64, 64), (40, 70)), seed=0):
    """An ImageFolder tree of smooth random JPEGs of several sizes (two classes)."""
    rng = np.random.default_rng(seed)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3)).astype(np.uint8)
            Image.fromarray(base).resize((w, h), Image.BICUBIC).save(root / c / f"{i}.jpg", quality=90)
    return root


def _old_load(path, resize):
    """The float path before uint8 transport: Pillow (to_rgb, resize, crop), pil_to_tensor, then /255 in float."""
    import torchvision.transforms.functional as TF

    from robustvit.data.base import to_rgb

    with Image.open(path) as im:
        im = to_rgb(im)
        x = TF.pil_to_tensor(im if resize is None else resize(im))
    return x.float().div_(255)


@pytest.fixture
def folder(tmp_path):
    return _jpeg_folder(tmp_path / "imgs")


@pytest.fixture
def cifar_c(tmp_path):
    """A CIFAR-C folder: fog.npy and contrast.npy (5 × 12 images) with labels.npy."""
    root = tmp_path / "cifarc"
    root.mkdir()
    rng = np.random.default_rng(1)
    for name in ("fog", "contrast"):
        np.save(root / f"{name}.npy", rng.integers(0, 256, (60, 32, 32, 3)).astype(np.uint8))
    np.save(root / "labels.npy", rng.integers(0, 10, 12))
    return open_corrupted(root)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


# ---------------------------------------------------------------- uint8 → float
def test_float_images_equal_the_cpu_division_for_every_value():
    x = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16).expand(2, 3, 16, 16)
    got = float_images(x)
    assert got.dtype == torch.float32 and _equal(got, to_float(x))
    ref = torch.from_numpy(np.arange(256, dtype=np.float32) / np.float32(255)).reshape(16, 16)
    assert torch.equal(got[1, 2], ref)
    assert _equal(divide_by_255(x), got)              # the device formula (one kernel), here on the CPU
    f = torch.rand(2, 3, 4, 4)
    assert float_images(f) is f


def test_why_not_multiply_by_the_reciprocal():
    """What CUDA's ``div_(255)`` computes (x · fl(1/255)) is not x / 255 in float32: the loader must not use it."""
    k = np.arange(256, dtype=np.float32)
    recip = k * (np.float32(1) / np.float32(255))
    assert int((recip != k / np.float32(255)).sum()) > 100


# ---------------------------------------------------------------- workers
def test_resolve_workers(monkeypatch):
    import robustvit.data.loader as L

    for cores, auto in ((1, 0), (2, 1), (6, 5), (64, 8)):
        monkeypatch.setattr(L, "available_cores", lambda c=cores: c)
        assert resolve_workers("auto") == auto and resolve_workers(" AUTO ") == auto and resolve_workers(None) == auto
    monkeypatch.setattr(L, "available_cores", lambda: 16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")           # torchrun: four ranks share the 16 cores
    assert resolve_workers("auto") == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert resolve_workers(0) == 0 and resolve_workers(3) == 3 and resolve_workers("4") == 4
    for bad in (-1, "-1", "many", 1.5, True, "2.0", ""):
        with pytest.raises(RobustvitError, match="--workers must be auto or an integer >= 0") as e:
            resolve_workers(bad)
        assert "\n" not in str(e.value)


def test_available_cores_follows_the_affinity():
    import robustvit.data.loader as L

    if hasattr(os, "sched_getaffinity"):
        assert L.available_cores() == len(os.sched_getaffinity(0))


# ---------------------------------------------------------------- read_batch: uint8 exactly where 8-bit
def _datasets(tmp_path, folder, cifar_c):
    npz = tmp_path / "d.npz"
    rng = np.random.default_rng(2)
    np.savez(npz, x=rng.integers(0, 256, (9, 20, 20, 3)).astype(np.uint8), y=np.arange(9) % 3)
    files = create_dataset(f"folder:{folder}", image_size=Resize(24, 0.875, "bicubic"))
    seq = np.random.default_rng(3).integers(0, 256, (7, 4, 16, 16, 3)).astype(np.uint8)
    np.save(tmp_path / "rotate.npy", seq)
    return {
        "synthshapes": (create_dataset("synthshapes:test:count=30:size=16"), True),
        "npz": (create_dataset(f"npz:{npz}"), True),
        "tensor-float": (TensorImageDataset(torch.rand(6, 3, 8, 8), torch.arange(6) % 2, ["a", "b"]), False),
        "folder": (files, True),
        "folder-bilinear-as-stored": (create_dataset(f"folder:{folder}", image_size=Resize(32, 1.0)), True),
        "subset-of-folder": (SubsetDataset(files, torch.tensor([5, 0, 3])), True),
        "resized-npz": (ResizedDataset(create_dataset(f"npz:{npz}"), Resize(28)), False),
        "resized-same-size": (ResizedDataset(create_dataset(f"npz:{npz}"), Resize(20)), True),
        "cifar-c": (cifar_c.unit("fog", 2), True),
        "cifar-p": (SequenceDataset(NpySequences(tmp_path / "rotate.npy", "rotate")), True),
    }


def test_read_batch_is_uint8_exactly_where_images_are_8_bit(tmp_path, folder, cifar_c):
    for name, (ds, eight_bit) in _datasets(tmp_path, folder, cifar_c).items():
        ids = torch.tensor([2, 0, 1])
        x, y = ds.read_batch(ids)
        ref, ry = ds.get_batch(ids)
        assert (x.dtype == torch.uint8) == eight_bit, name
        assert _equal(to_float(x), ref) and torch.equal(torch.as_tensor(y), torch.as_tensor(ry)), name
        assert to_float(x).stride() == ref.stride(), name         # the same memory layout reaches the model


def test_file_images_are_the_numbers_of_the_float_path(folder):
    """Pillow resizes and crops in 8 bits: the old float path was exactly uint8 / 255."""
    for interp in ("bilinear", "bicubic", "nearest", "lanczos"):
        r = Resize(24, 0.875, interp)
        ds = create_dataset(f"folder:{folder}", image_size=r)
        x, _ = ds.get_batch(torch.arange(len(ds)))
        old = torch.stack([_old_load(p, r) for p, _ in ds.samples])
        assert _equal(x, old), interp
        loaded = torch.cat([x for x, _ in iter_chunks(ds, [torch.arange(0, 5), torch.arange(5, len(ds))])])
        assert _equal(loaded, old), interp


# ---------------------------------------------------------------- iter_chunks
@pytest.mark.parametrize("workers,prefetch", [(0, 0), (0, 2), (1, 2)])
def test_iter_chunks_gives_the_float_batches_of_get_batch(tmp_path, folder, cifar_c, workers, prefetch):
    for name, (ds, _) in _datasets(tmp_path, folder, cifar_c).items():
        n = len(ds)
        chunks = [torch.arange(i, min(n, i + 3)) for i in range(0, n, 3)][::-1]        # any order, kept
        got = list(iter_chunks(ds, iter(chunks), workers=workers, prefetch=prefetch))
        assert len(got) == len(chunks), name
        for ids, (x, y) in zip(chunks, got):
            ref, ry = ds.get_batch(ids)
            assert _equal(x, ref) and x.stride() == ref.stride(), (name, ids)
            assert torch.equal(y, torch.as_tensor(ry).long()) and y.device.type == "cpu", name


class _Pulls:
    """A lazy chunk iterable that counts what was taken and fails (instead of hanging) when taken too far."""

    def __init__(self, n_images: int, size: int = 2, limit: int = 40) -> None:
        self.taken, self.n, self.size, self.limit = 0, n_images, size, limit

    def __iter__(self):
        for c in itertools.count():
            self.taken += 1
            assert self.taken <= self.limit, "the loader materialised the chunk iterable"
            yield torch.arange(c * self.size, c * self.size + self.size) % self.n


@pytest.mark.parametrize("workers,prefetch", [(0, 0), (0, 2), (1, 2)])
def test_chunks_are_taken_lazily(workers, prefetch):
    ds = create_dataset("synthshapes:test:count=20:size=8")
    pulls = _Pulls(len(ds))
    it = iter_chunks(ds, pulls, workers=workers, prefetch=prefetch)
    for _ in range(3):
        next(it)
    # 3 handed out + one on its way to the device + what the readers prefetch
    assert pulls.taken <= 3 + 1 + max(prefetch, 1) * max(workers, 1)
    it.close()


def test_each_chunk_is_taken_when_the_reading_needs_it():
    """With no read-ahead on the CPU, chunk k is taken when batch k is asked for; with read-ahead, ``prefetch``
    chunks ahead of the one handed out."""
    ds = create_dataset("synthshapes:test:count=20:size=8")
    for prefetch, ahead in ((0, 0), (1, 1), (3, 3)):
        pulls = _Pulls(len(ds))
        seen = []
        for k, _ in enumerate(iter_chunks(ds, pulls, prefetch=prefetch)):
            seen.append(pulls.taken)
            if k == 4:
                break
        assert seen == [k + 1 + ahead for k in range(5)], prefetch


class _Pids(ImageDataset):
    """Labels are the reading process's id (to see which processes read)."""

    classes = ["a"]

    def __len__(self) -> int:
        return 100

    def read_batch(self, index):
        return torch.zeros(len(index), 3, 2, 2, dtype=torch.uint8), torch.full((len(index),), os.getpid())

    def get_batch(self, index):
        x, y = self.read_batch(index)
        return to_float(x), y


def test_workers_persist_across_passes_of_one_loader():
    with ChunkLoader(_Pids(), workers=1) as loader:
        first = {int(y[0]) for _, y in loader.iter(torch.arange(i, i + 2) for i in range(0, 10, 2))}
        second = {int(y[0]) for _, y in loader.iter(torch.arange(i, i + 2) for i in range(0, 6, 2))}
        assert first == second and len(first) == 1 and os.getpid() not in first
    zero = {int(y[0]) for _, y in iter_chunks(_Pids(), [torch.arange(2)], workers=0)}
    assert zero == {os.getpid()}


def test_a_pass_abandoned_half_way_does_not_leak_into_the_next():
    ds = create_dataset("synthshapes:test:count=40:size=8")
    with ChunkLoader(ds, workers=1, prefetch=3) as loader:
        old = loader.iter(torch.arange(i, i + 4) for i in range(0, 40, 4))
        next(old)
        chunks = [torch.tensor([7, 8]), torch.tensor([30, 1, 2])]
        for ids, (x, y) in zip(chunks, loader.iter(iter(chunks))):
            assert _equal(x, ds.get_batch(ids)[0])
        with pytest.raises(RobustvitError, match="one pass at a time"):
            next(old)


def test_tagged_chunks_keep_their_tags():
    ds = create_dataset("synthshapes:test:count=20:size=8")
    with ChunkLoader(ds, workers=0) as loader:
        tagged = ((f"c{k}", torch.arange(k, k + 2)) for k in range(5))
        out = [(tag, y) for tag, _, y in loader.iter(tagged, tagged=True)]
    assert [t for t, _ in out] == [f"c{k}" for k in range(5)]
    assert all(torch.equal(y, ds.get_batch(torch.arange(k, k + 2))[1]) for k, (_, y) in enumerate(out))


def test_as_float_false_gives_the_batch_as_it_travelled(folder):
    ds = create_dataset(f"folder:{folder}", image_size=16)
    (x, _), = list(ChunkLoader(ds).iter([torch.arange(4)], as_float=False))
    assert x.dtype == torch.uint8 and _equal(float_images(x), ds.get_batch(torch.arange(4))[0])


# ---------------------------------------------------------------- unreadable files: as today
def _with_broken(folder):
    (folder / "b" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (folder / "a" / "empty.png").write_bytes(b"")
    return folder


@pytest.mark.parametrize("workers", [0, 1])
def test_unreadable_files_are_marked_as_before(folder, workers):
    ds = create_dataset(f"folder:{_with_broken(folder)}", image_size=16)
    bad = [i for i, (p, _) in enumerate(ds.samples) if p.endswith(("broken.jpg", "empty.png"))]
    ids = torch.arange(len(ds))
    with pytest.warns(UserWarning, match="skipping unreadable image") if workers == 0 else _nothing():
        (x, y), = list(iter_chunks(ds, [ids], workers=workers))
    with pytest.warns(UserWarning):
        ref, ry = ds.get_batch(ids)
    assert _equal(x, ref) and torch.equal(y, ry)
    assert (y[bad] == UNREADABLE).all() and (x[bad] == 0).all() and (y != UNREADABLE).sum() == len(ds) - 2


@pytest.mark.parametrize("workers", [0, 1])
def test_strict_unreadable_is_one_line_from_workers_too(folder, workers):
    ds = create_dataset(f"folder:{_with_broken(folder)}", image_size=16, strict=True)
    with pytest.raises(RobustvitError, match="cannot read image") as e:
        list(iter_chunks(ds, [torch.arange(len(ds))], workers=workers))
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------- decode="gpu": refusals and its logic on the CPU
def test_decode_gpu_refuses_without_cuda(folder):
    ds = create_dataset(f"folder:{folder}", image_size=16)
    for call in (lambda: ChunkLoader(ds, device="cpu", decode="gpu"),
                 lambda: next(iter_chunks(ds, [torch.arange(2)], decode="gpu"))):
        with pytest.raises(RobustvitError, match="--decode gpu .* CUDA device") as e:
            call()
        assert "\n" not in str(e.value)
    with pytest.raises(RobustvitError, match="--decode must be cpu or gpu"):
        ChunkLoader(ds, decode="nvjpeg")
    with pytest.raises(RobustvitError, match="lanczos: use --decode cpu"):
        check_decode("gpu", "cuda", Resize(224, 0.875, "lanczos"))
    check_decode("gpu", "cuda", Resize(224, 0.875, "bicubic"))           # fine (no CUDA needed to check)


def _cpu_nvjpeg(data, device):
    """nvjpeg's stand-in: torchvision's CPU JPEG decoder."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return [decode_jpeg(d, mode=ImageReadMode.RGB).to(device) for d in data]


@pytest.mark.parametrize("interp", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("workers", [0, 1])
def test_device_decode_resizes_and_crops_like_the_cpu_path(folder, interp, workers):
    ds = create_dataset(f"folder:{folder}", image_size=Resize(32, 0.875, interp))
    ids = torch.arange(len(ds))
    with ChunkLoader(ds, decode="gpu", gpu_decode=_cpu_nvjpeg, workers=workers) as loader:
        assert loader.jpeg is not None
        (x, y), = list(loader.iter([ids]))
    ref, ry = ds.get_batch(ids)
    assert x.shape == ref.shape == (len(ds), 3, 32, 32) and torch.equal(y, ry)
    diff = (x - ref).abs() * 255
    assert float(diff.max()) <= 1.0 + 1e-4 and float(diff.mean()) < 0.05       # rounding of the resize only
    if interp == "nearest":                      # Pillow's nearest rows and columns, exactly
        assert _equal(x, ref)


def test_device_decode_falls_back_to_the_cpu_for_other_files(folder):
    Image.new("RGB", (50, 40), (10, 200, 30)).save(folder / "a" / "p.png")
    Image.new("CMYK", (50, 40), (10, 20, 30, 40)).save(folder / "a" / "cmyk.jpg")
    Image.new("L", (30, 44), 77).save(folder / "b" / "grey.jpg")
    ds = create_dataset(f"folder:{_with_broken(folder)}", image_size=Resize(24, 1.0))
    names = [os.path.basename(p) for p, _ in ds.samples]
    calls = []

    def decode(data, device):
        calls.append(len(data))
        return _cpu_nvjpeg(data, device)

    loader = ChunkLoader(ds, decode="gpu", gpu_decode=decode)
    with pytest.warns(UserWarning, match="skipping unreadable image"):
        (x, y), = list(loader.iter([torch.arange(len(ds))]))
        ref, ry = ds.get_batch(torch.arange(len(ds)))
    assert torch.equal(y, ry)
    jpegs = [i for i, n in enumerate(names) if n.endswith(".jpg") and n not in ("cmyk.jpg", "broken.jpg")]
    assert calls == [len(jpegs)]                          # one batched decode of the RGB and grey JPEGs only
    cpu = [i for i in range(len(ds)) if i not in jpegs]   # PNG, CMYK, unreadable: the CPU path, bit for bit
    assert _equal(x[cpu], ref[cpu])
    assert float((x - ref).abs().max()) * 255 <= 1.0 + 1e-4


def test_device_decode_retries_image_by_image_when_a_batch_fails(folder):
    ds = create_dataset(f"folder:{folder}", image_size=Resize(16, 1.0))
    bad = 3

    def decode(data, device):              # refuses the whole batch when it holds image `bad`, that one alone too
        if any(torch.equal(d, target) for d in data):
            raise RuntimeError("nvjpeg: unsupported")
        return _cpu_nvjpeg(data, device)

    target = torch.frombuffer(bytearray(open(ds.samples[bad][0], "rb").read()), dtype=torch.uint8)
    (x, y), = list(ChunkLoader(ds, decode="gpu", gpu_decode=decode).iter([torch.arange(len(ds))]))
    ref, ry = ds.get_batch(torch.arange(len(ds)))
    assert torch.equal(y, ry) and _equal(x[bad], ref[bad])        # Pillow decoded the refused one
    assert float((x - ref).abs().max()) * 255 <= 1.0 + 1e-4


def test_device_decode_of_a_subset_reads_the_right_files(folder):
    ds = create_dataset(f"folder:{folder}", image_size=Resize(16, 1.0))
    sub = SubsetDataset(ds, torch.tensor([6, 1, 4]))
    (x, y), = list(ChunkLoader(sub, decode="gpu", gpu_decode=_cpu_nvjpeg).iter([torch.tensor([2, 0])]))
    ref, ry = sub.get_batch(torch.tensor([2, 0]))
    assert torch.equal(y, ry) and float((x - ref).abs().max()) * 255 <= 1.0 + 1e-4


def test_device_decode_leaves_other_data_sets_to_the_cpu_path():
    ds = create_dataset("synthshapes:test:count=8:size=8")
    with pytest.warns(UserWarning, match="is not read from image files"):
        loader = ChunkLoader(ds, decode="gpu", gpu_decode=_cpu_nvjpeg)
    (x, _), = list(loader.iter([torch.arange(4)]))
    assert loader.jpeg is None and _equal(x, ds.get_batch(torch.arange(4))[0])


def test_device_decoder_fit_without_resize_keeps_the_size(folder):
    ds = FileImageDataset(create_dataset(f"folder:{folder}").samples, ["a", "b"])
    dec = DeviceJpegDecoder(ds, torch.device("cpu"), _cpu_nvjpeg)
    img = torch.zeros(3, 13, 7, dtype=torch.uint8)
    assert dec.fit(img) is img


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear", "nearest"])
def test_device_decoder_resizes_each_size_together_as_it_does_one_image(folder, interpolation):
    ds = create_dataset(f"folder:{folder}", image_size=Resize(16, 0.875, interpolation))
    dec = DeviceJpegDecoder(ds, torch.device("cpu"), _cpu_nvjpeg)
    g = torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
            for h, w in ((30, 40), (40, 30), (30, 40), (19, 19), (30, 40), (40, 30))]
    got = dec.fit_all(imgs)
    assert len(got) == len(imgs) and all(torch.equal(a, dec.fit(im)) for a, im in zip(got, imgs))


# ---------------------------------------------------------------- parts (ImageNet-C / CIFAR-C units, -P files)
@pytest.mark.parametrize("workers", [0, 1])
def test_parts_give_each_unit_of_each_chunk(cifar_c, folder, workers):
    units = {f"{c}/{s}": cifar_c.unit(c, s) for c in ("fog", "contrast") for s in (1, 3)}
    clean = SubsetDataset(create_dataset(f"folder:{folder}", image_size=24), torch.arange(12) % 8)
    parts = {"clean": clean, **units}
    chunks = [torch.arange(0, 5), torch.arange(5, 10), torch.arange(10, 12)]
    seen = 0
    for (tag, got), ids in zip(iter_parts(parts, ((k, c) for k, c in enumerate(chunks)), workers=workers), chunks):
        assert tag == seen
        seen += 1
        for name, ds in parts.items():
            x, y = got.get(name)
            ref, ry = ds.get_batch(ids)
            assert _equal(x, ref) and torch.equal(y, ry), (name, tag)
    assert seen == 3


def test_parts_may_be_skipped_and_chosen_never_taken_back(cifar_c):
    parts = {n: cifar_c.unit("fog", s) for n, s in (("s1", 1), ("s2", 2), ("s3", 3))}
    chunks = [(0, torch.arange(0, 4)), (1, torch.arange(4, 8), ["s3"]), (2, torch.arange(8, 10), []),
              (3, torch.arange(8, 12), ["s1", "s2"])]
    with ChunkLoader(PartsDataset(parts)) as loader:
        out = loader.iter_parts(iter(chunks))
        tag, p = next(out)
        assert tag == 0 and _equal(p.get("s2")[0], parts["s2"].get_batch(torch.arange(0, 4))[0])   # s1 skipped
        with pytest.raises(RobustvitError, match="passed already"):
            p.get("s1")
        tag, p = next(out)                                                   # s3 of chunk 0 dropped on the way
        assert tag == 1 and _equal(p.get("s3")[0], parts["s3"].get_batch(torch.arange(4, 8))[0])
        with pytest.raises(RobustvitError, match="not read for this chunk"):
            p.get("s1")
        tag, p = next(out)
        assert tag == 2 and p.names == []
        tag, p = next(out)
        assert tag == 3 and _equal(p.get("s2")[0], parts["s2"].get_batch(torch.arange(8, 12))[0])
        assert next(out, None) is None
    with pytest.raises(RobustvitError, match="no part 'fog'"):
        list(iter_parts(parts, [(0, torch.arange(2), ["fog"])]))


def test_parts_chunks_are_taken_lazily(cifar_c):
    parts = {"a": cifar_c.unit("fog", 1), "b": cifar_c.unit("fog", 2)}
    pulls = _Pulls(12, limit=30)
    it = iter_parts(parts, ((k, ids) for k, ids in enumerate(pulls)), workers=0, prefetch=2)
    for _ in range(3):
        _, p = next(it)
        p.get("b")
    assert pulls.taken <= 3 + 3
    it.close()


def test_perturbation_sequences_as_parts(tmp_path):
    rng = np.random.default_rng(5)
    for name in ("rotate", "tilt"):
        np.save(tmp_path / f"{name}.npy", rng.integers(0, 256, (6, 5, 16, 16, 3)).astype(np.uint8))
    srcs = {n: NpySequences(tmp_path / f"{n}.npy", n) for n in ("rotate", "tilt")}
    parts = {n: SequenceDataset(s) for n, s in srcs.items()}
    for tag, p in iter_parts(parts, [(0, torch.tensor([4, 1, 2]))], workers=1):
        for n, src in srcs.items():
            x, y = p.get(n)
            ref, ry = src.get_sequences(torch.tensor([4, 1, 2]))
            assert x.shape == (3, 5, 3, 16, 16) and _equal(x, ref) and x.stride() == ref.stride()
            assert torch.equal(y, ry) and (y == -1).all()


def test_a_parts_read_stays_within_one_part(cifar_c):
    pds = PartsDataset({"a": cifar_c.unit("fog", 1), "b": cifar_c.unit("fog", 2)})
    assert len(pds) == 24 and _equal(pds.read_batch(pds.flat("b", torch.tensor([3])))[0],
                                     cifar_c.unit("fog", 2).read_batch(torch.tensor([3]))[0])
    with pytest.raises(RobustvitError, match="within one part"):
        pds.read_batch(torch.tensor([11, 12]))


# ---------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_gpu_float_images_equal_the_cpu_division():
    x = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16).expand(4, 3, 16, 16).contiguous()
    assert _equal(float_images(x.cuda()).cpu(), to_float(x))


@pytest.mark.gpu
@pytest.mark.parametrize("workers", [0, 1])
def test_gpu_iter_chunks_gives_the_cpu_numbers(tmp_path, folder, cifar_c, workers):
    for name, (ds, _) in _datasets(tmp_path, folder, cifar_c).items():
        n = len(ds)         # two chunks of at most 3 and 2 images (the subset holds 3)
        chunks = [c for c in (torch.arange(0, min(3, n)), torch.arange(min(3, n), min(5, n))) if c.numel()]
        for ids, (x, y) in zip(chunks, iter_chunks(ds, chunks, workers=workers, device="cuda"), strict=True):
            ref, ry = ds.get_batch(ids)
            assert x.is_cuda and _equal(x.cpu(), ref) and x.stride() == ref.stride(), name
            assert torch.equal(y, torch.as_tensor(ry)), name


@pytest.mark.gpu
def test_gpu_nvjpeg_decode_is_close_to_pillow(folder):
    ds = create_dataset(f"folder:{folder}", image_size=Resize(32, 0.875, "bicubic"))
    ids = torch.arange(len(ds))
    (x, y), = list(iter_chunks(ds, [ids], decode="gpu", device="cuda", workers=1))
    ref, ry = ds.get_batch(ids)
    assert x.is_cuda and x.shape == ref.shape and torch.equal(y, ry)
    assert float((x.cpu() - ref).abs().mean()) * 255 < 3.0     # nvjpeg's IDCT / upsampling differ from libjpeg's
    assert math.isfinite(float(x.sum()))
