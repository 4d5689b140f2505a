"""The contract every registered partitioner keeps (one test set, parametrised over the registry)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from benchmarks.workloads import zipf_keys
from router.partitioners import Partitioner, PartitionerState, available, create, get, register
from router.partitioners import registry as registry_module
from router.partitioners.keys import KeyBatch
from schemas.exceptions import ConfigError, UnknownPartitionerError

NAMES = available()
PACKAGE_DIR = Path(__file__).resolve().parents[2] / "router" / "partitioners"
FORBIDDEN = ("confluent_kafka", "aiokafka", "faust", "pyspark")
# small windows so that the runs below cross several window and slide boundaries
WINDOW, SLIDE = 600, 200


def zipf_stream(size: int, seed: int = 7, keys: int = 300) -> np.ndarray:
    return zipf_keys(size, 1.2, keys, seed)


def make(name: str, n: int = 8, seed: int = 1) -> Partitioner:
    return create(name, n, window=WINDOW, slide=SLIDE, seed=seed)


def run(part: Partitioner, keys: np.ndarray, start: int = 0, batch: int = 97) -> np.ndarray:
    """Feed ``keys`` in batches with a tuple-counter clock starting at ``start``."""
    out = []
    for s in range(0, len(keys), batch):
        chunk = keys[s : s + batch]
        times = np.arange(start + s, start + s + len(chunk), dtype=np.int64)
        res = part.assign(chunk, times)
        assert res.dtype == np.int32 and res.shape == (len(chunk),)
        out.append(res)
    return np.concatenate(out) if out else np.zeros(0, np.int32)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 3, 8])
def test_ids_in_range(name: str, n: int) -> None:
    out = run(make(name, n), zipf_stream(3000))
    assert out.shape == (3000,)
    assert out.min() >= 0 and out.max() < n
    if n > 1:  # every algorithm reaches more than one combiner on a 300-key stream
        assert np.unique(out).size > 1


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_under_seed(name: str) -> None:
    keys = zipf_stream(3000)
    first, second = run(make(name, seed=5), keys), run(make(name, seed=5), keys)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("name", NAMES)
def test_snapshot_restore_continues_identically(name: str) -> None:
    keys = zipf_stream(4000, seed=11)
    a = make(name)
    run(a, keys[:2500])
    state = PartitionerState.from_bytes(a.snapshot().to_bytes())
    assert state.name == name and state.params["n"] == 8
    b = make(name, seed=99)  # a different seed: everything must come from the state
    b.restore(state)
    np.testing.assert_array_equal(run(a, keys[2500:], start=2500), run(b, keys[2500:], start=2500))


@pytest.mark.parametrize("name", NAMES)
def test_restore_rejects_other_partitioner_or_n(name: str) -> None:
    state = make(name).snapshot()
    with pytest.raises(ValueError):
        make(name, n=5).restore(state)
    other = "hash" if name != "hash" else "shuffle"
    with pytest.raises(ValueError):
        make(other).restore(state)


@pytest.mark.parametrize("name", NAMES)
def test_bytes_str_int_keys_assign_identically(name: str) -> None:
    keys = zipf_stream(1500, seed=3)
    ints = [int(k) for k in keys]
    results = [
        run(make(name), keys),
        run(make(name), ints),  # type: ignore[arg-type]
        run(make(name), [str(k) for k in ints]),  # type: ignore[arg-type]
        run(make(name), [str(k).encode() for k in ints]),  # type: ignore[arg-type]
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(results[0], other)


@pytest.mark.parametrize("name", NAMES)
def test_empty_batch(name: str) -> None:
    keys = zipf_stream(1000, seed=4)
    plain, with_empty = make(name), make(name)
    expected = run(plain, keys)
    got = []
    for s in range(0, 1000, 97):
        empties: list[np.ndarray | list[int]] = [np.zeros(0, dtype=np.int64), []]
        for empty in empties:
            res = with_empty.assign(empty, np.zeros(0, dtype=np.int64))
            assert res.dtype == np.int32 and res.shape == (0,)
        chunk = keys[s : s + 97]
        got.append(with_empty.assign(chunk, np.arange(s, s + len(chunk))))
    np.testing.assert_array_equal(expected, np.concatenate(got))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("n", "kw"),
    [
        (0, {}),
        (-3, {}),
        (2.5, {}),
        (4, {"window": 0}),
        (4, {"window": -10}),
        (4, {"window": 100, "slide": 200}),
        (4, {"slide": 0}),
    ],
)
def test_invalid_settings_raise_config_error(name: str, n: float, kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError) as info:
        create(name, n, **kw)  # type: ignore[arg-type]
    assert name in str(info.value)


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownPartitionerError) as info:
        create("no-such-partitioner", 4)
    message = str(info.value)
    for name in ("hash", "shuffle", "pkg", "cm", "am", "cam", "lm"):
        assert name in message
    assert info.value.known == NAMES


class EverythingToZero(Partitioner):
    """A third-party partitioner: sends every tuple to combiner 0."""

    name = "to-zero"
    n_hashes = 0

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        return np.zeros(batch.size, dtype=np.int32)


@pytest.fixture
def clean_registry() -> Iterator[None]:
    before = dict(registry_module._REGISTRY)
    yield
    registry_module._REGISTRY.clear()
    registry_module._REGISTRY.update(before)


@pytest.mark.usefixtures("clean_registry")
def test_third_party_register() -> None:
    register("to-zero", EverythingToZero)
    register("to-zero-lazy", f"{__name__}:EverythingToZero")
    assert {"to-zero", "to-zero-lazy"} <= set(available())
    for name in ("to-zero", "to-zero-lazy"):
        part = create(name, 4, seed=1)
        assert isinstance(part, EverythingToZero)
        mixed: list[bytes | str | int] = [b"a", "b", 3]
        np.testing.assert_array_equal(part.assign(mixed), [0, 0, 0])
    assert get("to-zero-lazy") is EverythingToZero
    with pytest.raises(ValueError, match="already registered"):
        register("hash", EverythingToZero)
    with pytest.raises(ValueError):
        register("bad name!", EverythingToZero)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_partitioners_import_no_kafka_faust_or_spark() -> None:
    files = sorted(PACKAGE_DIR.rglob("*.py"))
    assert len(files) >= 5
    for path in files:
        bad = _imported_modules(path) & set(FORBIDDEN)
        assert not bad, f"{path.relative_to(PACKAGE_DIR)} imports {sorted(bad)}"
    # and at run time: importing every module of the package pulls none of them in
    modules = [
        "router.partitioners." + ".".join(p.relative_to(PACKAGE_DIR).with_suffix("").parts)
        for p in files
        if p.name != "__init__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    root = PACKAGE_DIR.parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["hash", "dalton", "cam"])
def test_restore_refuses_a_snapshot_of_another_state_layout(name: str) -> None:
    import dataclasses

    from router.partitioners.base import STATE_VERSION, StateVersionError

    part = create(name, 4, seed=1)
    part.assign(np.arange(100) % 7)
    state = part.snapshot()
    create(name, 4, seed=1).restore(state)  # same layout: fine
    for bad in (
        dataclasses.replace(state, version=STATE_VERSION + 1),
        dataclasses.replace(state, meta={**state.meta, "state": type(part).state_version + 1}),
        dataclasses.replace(state, meta={}),
    ):
        with pytest.raises(StateVersionError, match="layout"):
            create(name, 4, seed=1).restore(bad)
