from pathlib import Path

from schemas.docs import BEGIN, END, settings_reference

ROOT = Path(__file__).resolve().parents[2]


def test_readme_settings_reference_is_generated() -> None:
    text = (ROOT / "README.md").read_text()
    assert BEGIN in text and END in text, "run: python -m schemas.docs and paste between the markers"
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert section.strip() == settings_reference().strip(), "README settings reference is stale: python -m schemas.docs"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./deploy/test.sh" in readme and "deploy/test.sh" in ci
