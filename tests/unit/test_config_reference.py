"""docs/configuration.md is generated from Settings and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from autooptimize.config import Settings
from autooptimize.config_reference import DESCRIPTIONS, reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_is_described_and_every_description_is_a_setting():
    assert sorted(set(Settings.model_fields) - set(DESCRIPTIONS)) == [], "settings without a description"
    assert sorted(set(DESCRIPTIONS) - set(Settings.model_fields)) == [], "descriptions of settings that do not exist"


def test_the_document_is_what_the_code_generates():
    assert DOC.read_text() == reference(), (
        "docs/configuration.md differs from Settings: run `python -m autooptimize.config_reference > "
        "docs/configuration.md`")
    for name in Settings.model_fields:
        assert f"`AO_{name.upper()}`" in DOC.read_text()
