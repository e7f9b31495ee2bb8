"""Shared fixtures: the repository's vendored data, the `xmc` binary, and small trained models."""

import os
import pathlib
import shutil

import pytest

import xmc

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def xmc_binary() -> pathlib.Path:
    """The `xmc` CLI: $XMC_BIN, else the repository's release or debug build."""
    env = os.environ.get("XMC_BIN")
    candidates = [pathlib.Path(env)] if env else []
    candidates += [ROOT / "target" / "release" / "xmc", ROOT / "target" / "debug" / "xmc"]
    for c in candidates:
        if c.is_file():
            return c
    found = shutil.which("xmc")
    if found:
        return pathlib.Path(found)
    raise FileNotFoundError(
        "no xmc binary: build it with `cargo build --bin xmc` or set XMC_BIN"
    )


@pytest.fixture(scope="session")
def bibtex():
    """Bibtex's train and test splits (XC format) as CSR matrices."""
    xtr, ytr = xmc.read_data(DATA / "Bibtex" / "train.txt.gz")
    xte, yte = xmc.read_data(DATA / "Bibtex" / "test.txt.gz")
    return xtr, ytr, xte, yte


@pytest.fixture(scope="session")
def bibtex_model(bibtex):
    xtr, ytr, _, _ = bibtex
    return xmc.train(xtr, ytr, threads=2)


@pytest.fixture(scope="session")
def tags_text():
    """debian-tags-text's train and test splits (JSON Lines) as texts and label names."""
    tr = xmc.read_data(DATA / "debian-tags-text" / "train.jsonl.gz")
    te = xmc.read_data(DATA / "debian-tags-text" / "test.jsonl.gz")
    return tr[0], tr[1], te[0], te[1]


@pytest.fixture(scope="session")
def text_model(tags_text):
    texts, labels, _, _ = tags_text
    return xmc.train(texts, labels, threads=2)


def without_created(model, ignore=()):
    """A model's metadata without the training run's timings and time (and the config keys in
    `ignore`)."""
    info = dict(model.info)
    info.pop("created", None)
    for key in ignore:
        info["config"].pop(key, None)
    return info


def same_bundle(a, b, ignore=()):
    """Asserts two models' bundles hold the same bytes but for `created`: every section's CRC
    (the metadata's aside) and the metadata without `created`."""
    crc_a = [s for s in a._section_crcs() if s[0] != "meta"]
    crc_b = [s for s in b._section_crcs() if s[0] != "meta"]
    assert crc_a == crc_b
    assert without_created(a, ignore) == without_created(b, ignore)
