"""The pyarrow path's writer choices (autooptimize/arrow/writers.py)."""

from __future__ import annotations


def test_near_unique_columns_are_written_without_a_dictionary() -> None:
    """pyarrow keeps a dictionary whatever it saves: for unique strings that made files 3× larger."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from autooptimize.arrow.writers import dictionary_columns

    n = 50_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "v": [f"value-{i}" for i in range(n)],
                     "region": [("eu", "us", "apac")[i % 3] for i in range(n)],
                     "s": pa.array([{"a": i % 2} for i in range(n)])})
    chosen = dictionary_columns(data)
    assert chosen == ["region", "s"]
    sizes = {}
    for name, use in (("chosen", chosen), ("all", True)):
        out = io.BytesIO()
        pq.write_table(data, out, compression="zstd", use_dictionary=use)
        sizes[name] = len(out.getvalue())
    assert sizes["chosen"] < 0.6 * sizes["all"], sizes
    assert dictionary_columns(data.select(["region"])) is True
