from pathlib import Path

import pytest

from router.partitioners import available, create
from schemas.settings import SkewrouteSettings

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "configs").glob("*.yaml"))


def test_one_example_config_per_partitioner() -> None:
    assert {c.stem for c in CONFIGS} >= set(available()) - {"custom"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_example_config_loads_and_builds_its_partitioner(path: Path) -> None:
    s = SkewrouteSettings.load(path)
    route = s.routes[0]
    assert route.partitioner.name == path.stem
    part = create(
        route.partitioner.name,
        route.combiners,
        window=route.window.size,
        slide=route.window.slide,
        **route.partitioner.params(),
    )
    ids = part.assign([b"a", b"b", b"a"], [0, 1, 2])
    assert ids.min() >= 0 and ids.max() < route.combiners
