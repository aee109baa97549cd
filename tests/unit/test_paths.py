"""Containment on resolved paths (autooptimize.iceberg.paths), on a real local file system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autooptimize.iceberg import paths


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "table"
    outside = tmp_path / "outside"
    (root / "data" / "day=1").mkdir(parents=True)
    outside.mkdir()
    (outside / "precious.parquet").write_bytes(b"x")
    (root / "data" / "day=1" / "own.parquet").write_bytes(b"y")
    (root / "data" / "link").symlink_to(outside, target_is_directory=True)
    (root / "data" / "file-link.parquet").symlink_to(outside / "precious.parquet")
    return root, outside


@pytest.mark.parametrize(("path", "reason"), [
    ("data/day=1/own.parquet", None),
    ("data/new-dir/x", None),  # need not exist yet
    ("data/link/precious.parquet", "resolves_outside_root"),
    ("data/file-link.parquet", "resolves_outside_root"),
    ("data/../../outside/precious.parquet", "outside_root"),
    ("", "outside_root"),  # the root itself is not strictly under it
])
def test_refusal_judges_the_resolved_path(tree, path, reason) -> None:
    root, _ = tree
    for spelling in (str(root), f"file://{root}", f"file:{root}"):
        full = f"{spelling}/{path}".rstrip("/")
        problem = paths.refusal(spelling, full, "delete")
        assert (problem.why if problem else None) == reason, (spelling, path)


def test_other_schemes_compare_normalised_text() -> None:
    assert paths.refusal("s3://bucket/t", "s3a://bucket/t/data/x.parquet", "delete") is None
    assert paths.refusal("s3://bucket/t", "s3://bucket/t/../u/x", "delete").why == "outside_root"
    assert paths.refusal("s3://bucket/t", "file:///bucket/t/x", "delete").why == "other_file_system"


def test_walk_lists_links_as_links_and_never_descends_into_them(tree) -> None:
    root, _ = tree
    entries = {os.path.relpath(paths.local_path(e.uri), root): e.kind for e in paths.walk(str(root), str(root))}
    assert entries == {"data": "dir", "data/day=1": "dir", "data/day=1/own.parquet": "file",
                       "data/link": "link", "data/file-link.parquet": "link"}
    with pytest.raises(paths.PathRefused):
        list(paths.walk(str(root), f"{root}/data/link"))


def test_deleting_a_link_removes_the_link_never_its_target(tree) -> None:
    root, outside = tree
    with pytest.raises(paths.PathRefused):
        paths.delete_file(str(root), f"{root}/data/link/precious.parquet")
    with pytest.raises(paths.PathRefused):
        paths.delete_tree(str(root), f"{root}/data/link")
    assert paths.delete_tree(str(root), f"{root}/data")
    assert (outside / "precious.parquet").exists() and not (root / "data").exists()
    assert not paths.delete_tree(str(root), f"{root}/data")
    assert not paths.delete_file(str(root), f"{root}/data/gone.parquet")
