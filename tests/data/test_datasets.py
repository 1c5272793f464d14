"""Dataset loaders: bundled and synthetic sets, and the file formats read from local fixtures."""

from __future__ import annotations

import ast
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from airplan_qo.data import DATA_DIR_ENV, DATASETS, Dataset, load, safe_extract
from airplan_qo.errors import DataError, UnknownNameError, ValidationError

PACKAGE_DATA = Path(__file__).resolve().parents[2] / "airplan_qo" / "data"


# ------------------------------------------------------------------------------------------
# fixtures in the real formats


def _pickle(path: Path, obj: dict) -> None:
    # protocol 2 and bytes keys, like the original Python 2 CIFAR files
    with open(path, "wb") as handle:
        pickle.dump(obj, handle, protocol=2)


def _cifar_data(n: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 (n, 3072) whose red/green/blue planes hold 10/20/30 plus a per-image offset."""
    data = np.empty((n, 3072), dtype=np.uint8)
    offset = rng.integers(0, 100, size=(n, 1))
    data[:, :1024] = 10 + offset
    data[:, 1024:2048] = 20 + offset
    data[:, 2048:] = 30 + offset
    return data


def make_cifar10(root: Path, per_batch: int = 6, n_test: int = 5) -> Path:
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        _pickle(folder / f"data_batch_{i}", {
            b"batch_label": f"training batch {i} of 5".encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, size=per_batch)],
            b"data": _cifar_data(per_batch, rng),
            b"filenames": [f"img{i}_{j}.png".encode() for j in range(per_batch)],
        })
    _pickle(folder / "test_batch", {
        b"batch_label": b"testing batch 1 of 1",
        b"labels": [int(v) for v in rng.integers(0, 10, size=n_test)],
        b"data": _cifar_data(n_test, rng),
        b"filenames": [f"test{j}.png".encode() for j in range(n_test)],
    })
    _pickle(folder / "batches.meta", {
        b"label_names": [name.encode() for name in (
            "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
            "truck")],
        b"num_cases_per_batch": per_batch,
        b"num_vis": 3072,
    })
    return folder


def make_cifar100(root: Path, n_train: int = 40, n_test: int = 8) -> Path:
    rng = np.random.default_rng(1)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in (("train", n_train), ("test", n_test)):
        fine = rng.integers(0, 100, size=n)
        _pickle(folder / name, {
            b"data": _cifar_data(n, rng),
            b"fine_labels": [int(v) for v in fine],
            b"coarse_labels": [int(v) // 5 for v in fine],
            b"filenames": [f"{name}{j}.png".encode() for j in range(n)],
        })
    _pickle(folder / "meta", {
        b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
    })
    return folder


def make_tar(archive: Path, source_dir: Path, arcname: str) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source_dir, arcname=arcname)


# ------------------------------------------------------------------------------------------
# registry and the value type


def test_registry_names_and_unknown_name():
    assert {"digits", "synthetic", "cifar10", "cifar100", "tiny_imagenet"} <= set(DATASETS.names())
    with pytest.raises(UnknownNameError, match="did you mean 'cifar10'"):
        load("cifar1O")


def test_unknown_option_is_named():
    with pytest.raises(ValidationError, match="no option 'n_sample'.*n_samples"):
        load("synthetic", n_sample=100)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seed(seed):
    with pytest.raises(ValidationError, match="seed"):
        load("digits", seed=seed)


def test_from_arrays_infers_and_converts():
    rng = np.random.default_rng(0)
    x = rng.random((20, 4))
    y = np.arange(20) % 3
    ds = Dataset.from_arrays("mine", x, y, x[:5], y[:5])
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.n_classes == 3 and ds.input_shape == (4,)
    assert ds.n_train == 20 and ds.n_test == 5
    np.testing.assert_array_equal(ds.class_counts("train"), [7, 7, 6])
    assert not ds.x_train.flags.writeable
    with pytest.raises(ValueError):
        ds.x_train[0, 0] = 1.0
    assert "mine: 20 train / 5 test samples, 3 classes" in ds.describe()
    ds5 = Dataset.from_arrays("mine", x, y, x[:5], y[:5], n_classes=5)
    assert ds5.n_classes == 5


@pytest.mark.parametrize("change, message", [
    (dict(y_train=np.arange(19) % 3), "x_train has 20 samples but y_train has 19"),
    (dict(x_test=np.zeros((5, 3))), "x_test samples have shape"),
    (dict(y_train=np.full(20, 0.5)), "whole numbers"),
    (dict(y_train=-np.ones(20, dtype=int)), "negative"),
    (dict(x_train=np.full((20, 4), np.nan)), "NaN"),
    (dict(y_train=np.array(["a"] * 20)), "integer class indices"),
])
def test_from_arrays_rejects_malformed(change, message):
    rng = np.random.default_rng(0)
    args = dict(x_train=rng.random((20, 4)), y_train=np.arange(20) % 3,
                x_test=rng.random((5, 4)), y_test=np.arange(5) % 3)
    args.update(change)
    with pytest.raises(DataError, match=message):
        Dataset.from_arrays("mine", **args)


def test_labels_beyond_n_classes_rejected():
    x = np.zeros((4, 2))
    with pytest.raises(DataError, match="outside"):
        Dataset.from_arrays("mine", x, [0, 1, 2, 3], x, [0, 1, 2, 3], n_classes=3)


def test_data_layer_does_not_import_torch():
    for path in PACKAGE_DATA.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "torch" for n in names), path


# ------------------------------------------------------------------------------------------
# digits and synthetic


def test_digits_shapes_and_split():
    ds = load("digits", seed=0)
    assert ds.input_shape == (1, 8, 8) and ds.n_classes == 10
    assert ds.x_train.shape == (ds.n_train, 1, 8, 8) and ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int64
    assert ds.n_train + ds.n_test == 1797
    assert abs(ds.n_test - 0.2 * 1797) < 10
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0 and ds.x_train.max() == 1.0
    assert set(np.unique(ds.y_train)) == set(range(10)) == set(np.unique(ds.y_test))
    # stratified: every class has about 20% of its samples on the test side
    share = ds.class_counts("test") / (ds.class_counts("train") + ds.class_counts("test"))
    assert np.all(np.abs(share - 0.2) < 0.02)


def test_digits_are_scikit_learns_without_importing_it():
    """The digits table read from the file scikit-learn ships equals its load_digits, bit for
    bit; loading digits imports no scikit-learn (a fresh process, whose modules are its own)."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from airplan_qo.data.datasets import _digits_table

    table, bunch = _digits_table(), load_digits()
    assert np.array_equal(table[:, :-1], bunch.data)
    assert np.array_equal(table[:, -1].astype(int), bunch.target)
    code = ("import sys; from airplan_qo.data import load; load('digits'); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_digits_seeded_split():
    a, b, c = load("digits", seed=3), load("digits", seed=3), load("digits", seed=4)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.y_train, c.y_train)
    # the two splits together hold every image once: pixel sums match the full set's
    full = np.sort(np.concatenate([a.x_train.reshape(a.n_train, -1).sum(1),
                                   a.x_test.reshape(a.n_test, -1).sum(1)]))
    np.testing.assert_allclose(full, np.sort(c.x_train.reshape(c.n_train, -1).sum(1).tolist()
                                             + c.x_test.reshape(c.n_test, -1).sum(1).tolist()))


def test_digits_test_fraction_validated():
    with pytest.raises(ValidationError, match="test_fraction"):
        load("digits", test_fraction=1.5)


def _least_squares_accuracy(ds: Dataset) -> float:
    x = np.c_[ds.x_train, np.ones(ds.n_train)].astype(np.float64)
    targets = np.eye(ds.n_classes)[ds.y_train]
    w = np.linalg.solve(x.T @ x + 1e-3 * np.eye(x.shape[1]), x.T @ targets)
    pred = np.argmax(np.c_[ds.x_test, np.ones(ds.n_test)] @ w, axis=1)
    return float(np.mean(pred == ds.y_test))


def test_synthetic_defaults_learnable_not_trivial():
    ds = load("synthetic", seed=0)
    assert ds.n_train + ds.n_test == 6000 and ds.n_classes == 10 and ds.input_shape == (60,)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    counts = ds.class_counts("train") + ds.class_counts("test")
    assert counts.min() == counts.max() == 600
    acc = _least_squares_accuracy(ds)
    assert 0.4 < acc < 0.97, acc  # chance is 0.1


def test_synthetic_options_and_seeds():
    ds = load("synthetic", seed=1, n_samples=300, n_classes=3, n_features=7)
    assert ds.n_train + ds.n_test == 300 and ds.n_classes == 3 and ds.x_test.shape[1:] == (7,)
    again = load("synthetic", seed=1, n_samples=300, n_classes=3, n_features=7)
    other = load("synthetic", seed=2, n_samples=300, n_classes=3, n_features=7)
    np.testing.assert_array_equal(ds.x_train, again.x_train)
    assert not np.array_equal(ds.x_train, other.x_train)
    assert _least_squares_accuracy(load("synthetic", seed=0, class_sep=3.0)) > 0.95


@pytest.mark.parametrize("options", [dict(n_samples=0), dict(n_classes=1),
                                     dict(class_sep=-1.0), dict(n_samples=10, n_classes=10)])
def test_synthetic_bad_options(options):
    with pytest.raises(ValidationError):
        load("synthetic", **options)


# ------------------------------------------------------------------------------------------
# CIFAR


def test_cifar10_from_folder(tmp_path):
    make_cifar10(tmp_path)
    ds = load("cifar10", root=tmp_path)
    assert ds.x_train.shape == (30, 3, 32, 32) and ds.x_test.shape == (5, 3, 32, 32)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.n_classes == 10 and ds.y_train.min() >= 0 and ds.y_train.max() < 10
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    # channel first: plane 1 is green = red + 10 in the fixture
    np.testing.assert_allclose(ds.x_train[:, 1] - ds.x_train[:, 0], 10 / 255, atol=1e-6)
    assert ds.class_names[0] == "airplane" and len(ds.class_names) == 10
    # the batch folder itself also works as root
    assert load("cifar10", root=tmp_path / "cifar-10-batches-py").n_train == 30


def test_cifar10_env_var(tmp_path, monkeypatch):
    make_cifar10(tmp_path)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert load("cifar10").n_test == 5


def test_cifar10_max_per_class(tmp_path):
    make_cifar10(tmp_path, per_batch=20)
    ds = load("cifar10", root=tmp_path, max_per_class=2, seed=5)
    assert ds.class_counts().max() <= 2
    again = load("cifar10", root=tmp_path, max_per_class=2, seed=5)
    np.testing.assert_array_equal(ds.x_train, again.x_train)


def test_cifar10_from_archive(tmp_path):
    make_cifar10(tmp_path / "src")
    root = tmp_path / "data"
    root.mkdir()
    make_tar(root / "cifar-10-python.tar.gz", tmp_path / "src" / "cifar-10-batches-py",
             "cifar-10-batches-py")
    ds = load("cifar10", root=root)
    assert ds.x_train.shape == (30, 3, 32, 32)
    assert (root / "cifar-10-batches-py" / "test_batch").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py",
                                                      "cifar-10-python.tar.gz"]


def test_missing_cifar10_message(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(DataError, match=f"root=PATH.*{DATA_DIR_ENV}.*cifar-10-batches-py"):
        load("cifar10")
    with pytest.raises(DataError) as info:
        load("cifar10", root=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "cifar-10-batches-py" / "test_batch") in message
    assert str(tmp_path / "cifar-10-python.tar.gz") in message
    assert "data_batch_1" in message and DATA_DIR_ENV in message and "downloaded" in message
    with pytest.raises(DataError, match="does not exist"):
        load("cifar10", root=tmp_path / "nowhere")


def test_cifar10_missing_batch_and_bad_contents(tmp_path):
    folder = make_cifar10(tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3"):
        load("cifar10", root=tmp_path)
    _pickle(folder / "data_batch_3", {b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]})
    with pytest.raises(DataError, match=r"data_batch_3.*\(n, 3072\)"):
        load("cifar10", root=tmp_path)
    _pickle(folder / "data_batch_3", {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]})
    with pytest.raises(DataError, match="outside"):
        load("cifar10", root=tmp_path)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


def test_cifar_pickle_with_code_is_refused(tmp_path):
    folder = make_cifar10(tmp_path)
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump({b"data": _Exploit(), b"labels": []}, handle)
    with pytest.raises(DataError, match="disallowed"):
        load("cifar10", root=tmp_path)


def test_cifar100_fine_and_coarse(tmp_path):
    make_cifar100(tmp_path)
    fine = load("cifar100", root=tmp_path)
    assert fine.n_classes == 100 and fine.x_train.shape == (40, 3, 32, 32)
    assert fine.x_test.shape == (8, 3, 32, 32) and fine.x_test.dtype == np.float32
    assert fine.y_train.max() < 100 and fine.class_names[3] == "fine3"
    coarse = load("cifar100", root=tmp_path, label_mode="coarse")
    assert coarse.n_classes == 20 and coarse.y_train.max() < 20
    np.testing.assert_array_equal(coarse.y_train, fine.y_train // 5)
    with pytest.raises(ValidationError, match="label_mode"):
        load("cifar100", root=tmp_path, label_mode="medium")


def test_cifar100_from_archive_and_missing(tmp_path):
    with pytest.raises(DataError, match="cifar-100-python"):
        load("cifar100", root=tmp_path)
    make_cifar100(tmp_path / "src")
    make_tar(tmp_path / "cifar-100-python.tar.gz", tmp_path / "src" / "cifar-100-python",
             "cifar-100-python")
    assert load("cifar100", root=tmp_path).n_train == 40


# ------------------------------------------------------------------------------------------
# archive safety


def _add_bytes(tar: tarfile.TarFile, name: str, payload: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize("member", [
    "../evil", "cifar-10-batches-py/../../evil", "/tmp/evil-absolute", "symlink", "hardlink",
    "device", "fifo",
])
def test_malicious_archive_rejected(tmp_path, member):
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add_bytes(tar, "cifar-10-batches-py/readme.txt")
        if member == "symlink":
            tar.addfile(_special("cifar-10-batches-py/link", tarfile.SYMTYPE, "/etc/passwd"))
        elif member == "hardlink":
            tar.addfile(_special("cifar-10-batches-py/hard", tarfile.LNKTYPE, "readme.txt"))
        elif member == "device":
            tar.addfile(_special("cifar-10-batches-py/dev", tarfile.CHRTYPE))
        elif member == "fifo":
            tar.addfile(_special("cifar-10-batches-py/pipe", tarfile.FIFOTYPE))
        else:
            _add_bytes(tar, member, b"evil")
    dest = tmp_path / "out"
    with pytest.raises(DataError, match="unsafe"):
        safe_extract(archive, dest)
    assert not dest.exists()
    assert not (tmp_path / "evil").exists()


def test_malicious_cifar_archive_rejected_by_loader(tmp_path):
    make_cifar10(tmp_path / "src")
    root = tmp_path / "data"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
        _add_bytes(tar, "../evil", b"evil")
    with pytest.raises(DataError, match=r"'\.\./evil' is unsafe"):
        load("cifar10", root=root)
    assert not (tmp_path / "evil").exists()
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-python.tar.gz"]


def test_safe_extract_ok_and_corrupt(tmp_path):
    archive = tmp_path / "ok.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add_bytes(tar, "a/b.txt", b"hello")
    assert safe_extract(archive, tmp_path / "out") == ["a/b.txt"]
    assert (tmp_path / "out" / "a" / "b.txt").read_bytes() == b"hello"
    (tmp_path / "junk.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(DataError, match="cannot extract"):
        safe_extract(tmp_path / "junk.tar.gz", tmp_path / "out2")


# ------------------------------------------------------------------------------------------
# Tiny ImageNet


def _tiny_layout(root: Path, wnids: list[str], per_class: int, write_image) -> Path:
    folder = root / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(wnids) + "\n")
    lines = []
    for k, wnid in enumerate(wnids):
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        for j in range(per_class):
            write_image(images / f"{wnid}_{j}.JPEG", k)
        name = f"val_{k}.JPEG"
        write_image(folder / "val" / "images" / name, k)
        lines.append(f"{name}\t{wnid}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_tiny_imagenet_decodes(tmp_path):
    image_module = pytest.importorskip("PIL.Image")

    def write(path, k):
        pixels = np.full((64, 64, 3), 40 * k, dtype=np.uint8)
        image_module.fromarray(pixels).save(path, format="JPEG")

    wnids = ["n01443537", "n01629819", "n01641577"]
    _tiny_layout(tmp_path, wnids, 4, write)
    ds = load("tiny_imagenet", root=tmp_path)
    assert ds.x_train.shape == (12, 3, 64, 64) and ds.x_test.shape == (3, 3, 64, 64)
    assert ds.x_train.dtype == np.float32 and ds.n_classes == 3
    assert ds.class_names == tuple(wnids)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [4, 4, 4])
    np.testing.assert_array_equal(ds.y_test, [0, 1, 2])
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
    small = load("tiny_imagenet", root=tmp_path, max_per_class=2)
    np.testing.assert_array_equal(np.bincount(small.y_train), [2, 2, 2])


def test_tiny_imagenet_needs_pillow(tmp_path, monkeypatch):
    _tiny_layout(tmp_path, ["n01"], 1, lambda path, k: path.write_bytes(b"\xff\xd8"))
    monkeypatch.setitem(__import__("sys").modules, "PIL", None)
    with pytest.raises(DataError, match="needs Pillow"):
        load("tiny_imagenet", root=tmp_path)


def test_tiny_imagenet_layout_errors(tmp_path):
    with pytest.raises(DataError, match="tiny-imagenet-200"):
        load("tiny_imagenet", root=tmp_path)
    folder = _tiny_layout(tmp_path, ["n01", "n02"], 1, lambda path, k: path.write_bytes(b""))
    (folder / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match="line 1"):
        load("tiny_imagenet", root=tmp_path)
    (folder / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataError, match="val_annotations.txt"):
        load("tiny_imagenet", root=tmp_path)


def test_cifar_like_stand_in_is_read_as_cifar10_and_depends_on_its_label(tmp_path):
    """benchmarks/cifar_like.py writes files the cifar10 loader reads; an image is its class's
    pattern plus noise, so images of one class are closer to each other than to another's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cifar_like", Path(__file__).resolve().parents[2] / "benchmarks" / "cifar_like.py")
    cifar_like = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cifar_like)
    cifar_like.write(tmp_path, n_train=203, n_test=40, noise=0.1, shift=2, seed=3)
    ds = load("cifar10", root=tmp_path)
    assert (ds.n_train, ds.n_test, ds.input_shape, ds.n_classes) == (203, 40, (3, 32, 32), 10)
    assert set(np.unique(ds.y_train)) <= set(range(10)) and len(np.unique(ds.y_train)) == 10
    x = np.asarray(ds.x_train).reshape(ds.n_train, -1)
    means = np.stack([x[ds.y_train == c].mean(axis=0) for c in range(10)])
    nearest = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    assert (nearest == ds.y_train).mean() > 0.9
