from pathlib import Path

from schemas.docs import reference_page

ROOT = Path(__file__).resolve().parents[2]


def test_settings_reference_is_generated() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    assert text == reference_page(), "docs/settings.md is stale: run python -m schemas.docs"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./deploy/test.sh" in readme and "deploy/test.sh" in ci
