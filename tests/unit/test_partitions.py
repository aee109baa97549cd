"""Partition identity: Iceberg values ↔ JSON key ↔ human form, for every transform pyiceberg supports."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from autooptimize.domain.partitions import PartitionRef, decode_key, encode_key, escape_human, unescape_human
from autooptimize.errors import InvalidArgument
from autooptimize.iceberg.partitions import human, parse_human, record_of, ref_of

SCHEMA = Schema(
    NestedField(1, "ts", TimestampType()), NestedField(2, "tz", TimestamptzType()),
    NestedField(3, "name", StringType()), NestedField(4, "id", LongType()), NestedField(5, "d", DateType()),
    NestedField(6, "n", IntegerType()), NestedField(7, "flag", BooleanType()), NestedField(8, "u", UUIDType()),
    NestedField(9, "amount", DecimalType(10, 2)),
)
EPOCH = dt.datetime(1970, 1, 1)


def _spec(*fields: tuple[int, object, str]) -> PartitionSpec:
    return PartitionSpec(*[PartitionField(src, 1000 + i, t, name) for i, (src, t, name) in enumerate(fields)],
                         spec_id=0)


def _record(spec: PartitionSpec, *source_values):
    out = []
    for f, v in zip(spec.fields, source_values, strict=True):
        source_type = SCHEMA.find_field(f.source_id).field_type
        out.append(f.transform.transform(source_type)(v))
    return Record(*out)


def _micros(moment: dt.datetime) -> int:
    delta = moment - (EPOCH if moment.tzinfo is None else EPOCH.replace(tzinfo=dt.UTC))
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


CASES = [
    (_spec((1, HourTransform(), "ts_hour")), (_micros(dt.datetime(2024, 6, 1, 12, 30)),), "ts_hour=2024-06-01-12"),
    (_spec((1, DayTransform(), "ts_day")), (_micros(dt.datetime(2024, 6, 1, 12)),), "ts_day=2024-06-01"),
    (_spec((1, MonthTransform(), "ts_month")), (_micros(dt.datetime(2024, 6, 1)),), "ts_month=2024-06"),
    (_spec((1, YearTransform(), "ts_year")), (_micros(dt.datetime(2024, 6, 1)),), "ts_year=2024"),
    (_spec((2, HourTransform(), "tz_hour")), (_micros(dt.datetime(2024, 6, 1, 23, tzinfo=dt.UTC)),),
     "tz_hour=2024-06-01-23"),
    (_spec((4, BucketTransform(16), "id_bucket")), (12345,), None),
    (_spec((3, TruncateTransform(2), "name_trunc")), ("abcdef",), "name_trunc=ab"),
    (_spec((3, IdentityTransform(), "name")), ("a,b/c=d%e ünï",), None),
    (_spec((3, IdentityTransform(), "name")), ("null",), None),
    (_spec((3, IdentityTransform(), "name")), ("",), "name="),
    (_spec((3, IdentityTransform(), "name")), (None,), "name=null"),
    (_spec((5, IdentityTransform(), "d")), (19875,), None),
    (_spec((6, IdentityTransform(), "n")), (-7,), "n=-7"),
    (_spec((7, IdentityTransform(), "flag")), (True,), "flag=true"),
    (_spec((8, IdentityTransform(), "u")), (uuid.UUID("12345678-1234-5678-1234-567812345678"),), None),
    (_spec((9, IdentityTransform(), "amount")), (Decimal("12.30"),), None),
    (_spec((1, IdentityTransform(), "ts")), (_micros(dt.datetime(2024, 6, 1, 12, 0, 1, 5)),), None),
    (_spec((4, VoidTransform(), "gone")), (5,), "gone=null"),
    (_spec((1, DayTransform(), "ts_day"), (4, BucketTransform(4), "id_bucket")),
     (_micros(dt.datetime(2024, 6, 1)), 99), None),
]


@pytest.mark.parametrize(("spec", "source", "printed"), CASES, ids=[c[2] or str(i) for i, c in enumerate(CASES)])
def test_every_transform_round_trips_through_key_and_human_form(spec, source, printed):
    record = _record(spec, *source)
    ref = ref_of(spec, SCHEMA, record)
    assert PartitionRef.of_key(spec.spec_id, ref.key) == ref  # through what PostgreSQL stores
    assert tuple(record_of(spec, SCHEMA, ref)) == tuple(record)  # back to what the manifests hold
    text = human(spec, SCHEMA, ref)
    if printed is not None:
        assert text == printed
    assert parse_human(spec, SCHEMA, text) == ref  # the CLI accepts what status prints
    assert parse_human(spec, SCHEMA, text.replace("/", ",")) == ref


def test_null_and_the_string_null_differ():
    spec = _spec((3, IdentityTransform(), "name"))
    null = ref_of(spec, SCHEMA, Record(None))
    word = ref_of(spec, SCHEMA, Record("null"))
    assert null != word and null.key != word.key
    assert human(spec, SCHEMA, null) != human(spec, SCHEMA, word)


@pytest.mark.parametrize(("expression", "message"), [
    ("ts_hour=2024-06-01T12", "YYYY-MM-DD-HH"),
    ("ts_hour=2024-06-01-24", "YYYY-MM-DD-HH"),
    ("ts_hour=12", "YYYY-MM-DD-HH"),
    ("hour=2024-06-01-12", "valid fields: ts_hour"),
    ("ts_hour", "malformed"),
    ("", "empty"),
    ("ts_hour=2024-06-01-12\n", "not one line"),
    ("ts_hour=2024-06-01-12,ts_hour=2024-06-01-13", "twice"),
])
def test_bad_expressions_name_the_input_and_the_valid_form(expression, message):
    spec = _spec((1, HourTransform(), "ts_hour"))
    with pytest.raises(InvalidArgument, match=message):
        parse_human(spec, SCHEMA, expression)


def test_bucket_out_of_range_and_bad_escape_are_refused():
    with pytest.raises(InvalidArgument, match="id_bucket"):
        parse_human(_spec((4, BucketTransform(4), "id_bucket")), SCHEMA, "id_bucket=4")
    with pytest.raises(InvalidArgument, match="bad escape"):
        parse_human(_spec((3, IdentityTransform(), "name")), SCHEMA, "name=%zz")


def test_key_is_canonical_json_and_rejects_other_text():
    assert encode_key((473184, "ab", None)) == '[473184,"ab",null]'
    assert encode_key(()) == "" and decode_key("") == ()
    for bad in ("ts_hour=1", "{}", "[[1]]"):
        with pytest.raises(InvalidArgument):
            decode_key(bad)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_escaping_round_trips_any_string(text):
    assert unescape_human(escape_human(text)) == text
    assert not any(c in escape_human(text) for c in ",/=\n")


@settings(max_examples=100, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
       st.integers(min_value=-2**40, max_value=2**40), st.text(max_size=12))
def test_multi_field_specs_round_trip(moment, number, text):
    spec = _spec((1, HourTransform(), "ts_hour"), (4, BucketTransform(8), "id_bucket"),
                 (3, TruncateTransform(3), "name_trunc"), (1, IdentityTransform(), "ts"))
    record = _record(spec, _micros(moment), number, text, _micros(moment))
    ref = ref_of(spec, SCHEMA, record)
    assert parse_human(spec, SCHEMA, human(spec, SCHEMA, ref)) == ref
