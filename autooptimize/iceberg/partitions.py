"""Partition values between pyiceberg, the service's JSON identity and the human form, per transform.

pyiceberg keeps a partition as a Record of transform results (``hour(ts)`` → hours since 1970, a date
→ days, a uuid → UUID, a decimal → Decimal, binary → bytes). :func:`ref_of` turns one into a
:class:`PartitionRef` of JSON scalars, :func:`record_of` turns it back. :func:`human` prints what the
CLI and status show (``ts_hour=2024-06-01-12``) and :func:`parse_human` reads it back, for every
transform pyiceberg supports: identity, year, month, day, hour, bucket, truncate and void.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from pyiceberg.partitioning import PartitionSpec
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
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from autooptimize.domain.partitions import JsonScalar, PartitionRef, decode_key, format_human, split_human
from autooptimize.errors import InvalidArgument

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = dt.date(1970, 1, 1)


def _result_types(spec: PartitionSpec, schema: Schema) -> list[Any]:
    return [f.transform.result_type(schema.find_field(f.source_id).field_type) for f in spec.fields]


def to_json(value: Any, result_type: Any) -> JsonScalar:
    """One partition value (as pyiceberg holds it) as a JSON scalar."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(result_type, DecimalType):
        return str(value)
    if isinstance(result_type, UUIDType):
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))
    if isinstance(result_type, BinaryType | FixedType):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - _EPOCH_DAY).days
    if isinstance(value, int | float | str):
        return value
    raise InvalidArgument(f"partition value {value!r} of type {result_type} has no JSON form")


def from_json(value: JsonScalar, result_type: Any) -> Any:
    """Inverse of :func:`to_json`: the value pyiceberg keeps in a partition Record."""
    if value is None:
        return None
    if isinstance(result_type, DecimalType):
        return Decimal(str(value))
    if isinstance(result_type, UUIDType):
        return uuid.UUID(str(value))
    if isinstance(result_type, BinaryType | FixedType):
        return base64.b64decode(str(value))
    return value


def ref_of(spec: PartitionSpec, schema: Schema, record: Any) -> PartitionRef:
    types = _result_types(spec, schema)
    return PartitionRef(spec.spec_id, tuple(to_json(record[i], t) for i, t in enumerate(types)))


def record_of(spec: PartitionSpec, schema: Schema, ref: PartitionRef) -> Record:
    types = _result_types(spec, schema)
    if len(ref.values) != len(types):
        raise InvalidArgument(f"partition {ref.key!r} has {len(ref.values)} value(s); spec {spec.spec_id} has "
                              f"{len(types)} field(s)")
    return Record(*[from_json(v, t) for v, t in zip(ref.values, types, strict=True)])


def human_values(spec: PartitionSpec, schema: Schema, ref: PartitionRef) -> list[tuple[str, str | None]]:
    """(field name, human value or None for null) per field, as Iceberg prints them."""
    types = _result_types(spec, schema)
    record = record_of(spec, schema, ref)
    return [(f.name, None if record[i] is None else f.transform.to_human_string(types[i], record[i]))
            for i, f in enumerate(spec.fields)]


def human(spec: PartitionSpec, schema: Schema, ref: PartitionRef) -> str:
    """``ts_hour=2024-06-01-12/id_bucket=3``; "" for an unpartitioned spec. :func:`parse_human` reads it."""
    return format_human(human_values(spec, schema, ref)) if spec.fields else ""


_FORMS = {YearTransform: "YYYY such as 2024", MonthTransform: "YYYY-MM such as 2024-06",
          DayTransform: "YYYY-MM-DD such as 2024-06-01", HourTransform: "YYYY-MM-DD-HH such as 2024-06-01-12"}


def parse_human(spec: PartitionSpec, schema: Schema, expression: str) -> PartitionRef:
    """The partition of ``spec`` that ``expression`` names (what :func:`human` prints, ``,`` or ``/``
    between fields). Raises InvalidArgument naming the field, the value and the valid form."""
    names = [f.name for f in spec.fields]
    if not names:
        raise InvalidArgument("the table is unpartitioned; omit the partition")
    raw = split_human(expression, names)
    values: list[JsonScalar] = []
    for pfield, result_type in zip(spec.fields, _result_types(spec, schema), strict=True):
        text = raw[pfield.name]
        source_type = schema.find_field(pfield.source_id).field_type
        try:
            value = None if text is None else _parse_value(pfield.transform, source_type, result_type, text)
        except (ValueError, InvalidOperation, OverflowError, TypeError):
            form = _FORMS.get(type(pfield.transform), f"a {result_type} value")
            raise InvalidArgument(f"partition value {text!r} for {pfield.name!r} ({pfield.transform}) is not "
                                  f"valid; expected {form}") from None
        values.append(to_json(value, result_type))
    return PartitionRef(spec.spec_id, tuple(values))


def _parse_value(transform: Any, source_type: Any, result_type: Any, text: str) -> Any:
    if isinstance(transform, VoidTransform):
        raise ValueError("void partitions are always null")
    if isinstance(transform, YearTransform):
        return _whole(r"(\d{4})", text)[0] - 1970
    if isinstance(transform, MonthTransform):
        year, month = _whole(r"(\d{4})-(\d{2})", text)
        dt.date(year, month, 1)
        return (year - 1970) * 12 + month - 1
    if isinstance(transform, DayTransform):
        return (dt.date.fromisoformat(_strict_date(text)) - _EPOCH_DAY).days
    if isinstance(transform, HourTransform):
        year, month, day, hour = _whole(r"(\d{4})-(\d{2})-(\d{2})-(\d{2})", text)
        if hour > 23:
            raise ValueError(text)
        return (dt.date(year, month, day) - _EPOCH_DAY).days * 24 + hour
    if isinstance(transform, BucketTransform):
        bucket = int(text)
        if not 0 <= bucket < transform.num_buckets:
            raise ValueError(text)
        return bucket
    if isinstance(transform, IdentityTransform | TruncateTransform):
        return _parse_typed(result_type, text)
    raise ValueError(f"unsupported transform {transform}")


def _whole(pattern: str, text: str) -> list[int]:
    match = re.fullmatch(pattern, text)
    if match is None:
        raise ValueError(text)
    return [int(g) for g in match.groups()]


def _strict_date(text: str) -> str:
    _whole(r"(\d{4})-(\d{2})-(\d{2})", text)
    return text


def _parse_typed(result_type: Any, text: str) -> Any:
    if isinstance(result_type, BooleanType):
        if text not in ("true", "false"):
            raise ValueError(text)
        return text == "true"
    if isinstance(result_type, IntegerType | LongType):
        return int(text)
    if isinstance(result_type, FloatType | DoubleType):
        return float(text)
    if isinstance(result_type, DecimalType):
        return Decimal(text)
    if isinstance(result_type, DateType):
        return (dt.date.fromisoformat(_strict_date(text)) - _EPOCH_DAY).days
    if isinstance(result_type, TimeType):
        t = dt.time.fromisoformat(text)
        return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    if isinstance(result_type, TimestamptzType):
        moment = dt.datetime.fromisoformat(text)
        if moment.tzinfo is None:
            raise ValueError(text)
        return _micros(moment - _EPOCH_TZ)
    if isinstance(result_type, TimestampType):
        moment = dt.datetime.fromisoformat(text)
        if moment.tzinfo is not None:
            raise ValueError(text)
        return _micros(moment - _EPOCH)
    if isinstance(result_type, StringType):
        return text
    if isinstance(result_type, UUIDType):
        return uuid.UUID(text)
    if isinstance(result_type, BinaryType | FixedType):
        return base64.b64decode(text, validate=True)
    raise ValueError(f"unsupported type {result_type}")


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_TIME_TRANSFORMS = (YearTransform, MonthTransform, DayTransform, HourTransform)


def time_ordinal(spec: PartitionSpec | None, key: str) -> int | None:
    """The value, in the partition ``key``, of ``spec``'s first year, month, day or hour field (years,
    months, days or hours since 1970): the order of the table's time partitions. None when the spec has
    no such field or the value is null."""
    if spec is None:
        return None
    values = decode_key(key)
    for i, f in enumerate(spec.fields):
        if isinstance(f.transform, _TIME_TRANSFORMS):
            value = values[i] if i < len(values) else None
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None
