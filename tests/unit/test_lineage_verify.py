"""The v3 lineage check of a group an executor wrote (services/rewrite/lineage.written_lineage): the
(rows, checksum) with _row_id and _last_updated_sequence_number the task kept must equal what it read
back; a group without those figures on a v3 table is not committed either."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autooptimize.domain.actions import Hooks
from autooptimize.errors import VerificationFailed
from autooptimize.services.rewrite.lineage import written_lineage


def _written(lineage_in, lineage_out):
    return SimpleNamespace(paths=("file:///t/data/x.parquet",), lineage_in=lineage_in, lineage_out=lineage_out)


def test_equal_lineage_figures_pass():
    written_lineage(None, "g0", _written((10, "10:a:b"), (10, "10:a:b")), Hooks())


@pytest.mark.parametrize("found", [(10, "10:a:c"), (9, "9:a:b")])
def test_changed_lineage_fails(found):
    with pytest.raises(VerificationFailed, match="row lineage of g0 changed"):
        written_lineage(None, "g0", _written((10, "10:a:b"), found), Hooks())


@pytest.mark.parametrize("figures", [(None, (10, "10:a:b")), ((10, "10:a:b"), None), (None, None)])
def test_missing_lineage_fails(figures):
    with pytest.raises(VerificationFailed, match="did not carry row lineage"):
        written_lineage(None, "g0", _written(*figures), Hooks())
