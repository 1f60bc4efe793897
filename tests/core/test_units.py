"""Tests of simcoll.core.units: parsing quantities written by people, and the formatters.

Every expected value is computed here from the unit's definition (KB = 10**3 B,
KiB = 2**10 B, 1 Gbit = 10**9 bits = 10**9 / 8 B, ...), never copied from a run.
"""

from __future__ import annotations

import math

import pytest

from simcoll.core.errors import SimcollError, UnitError
from simcoll.core.units import (
    format_bandwidth,
    format_bytes,
    format_time,
    parse_bandwidth_bytes_per_s,
    parse_quantity,
    parse_size_bytes,
    parse_time_s,
)


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text
    assert isinstance(error.value, SimcollError)
    return text


# --- sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 B", 1),
        ("512 B", 512),
        ("1 KB", 10**3),
        ("1 KiB", 2**10),
        ("3 MB", 3 * 10**6),
        ("3 MiB", 3 * 2**20),
        ("2 GB", 2 * 10**9),
        ("2 GiB", 2 * 2**30),
        ("5 TB", 5 * 10**12),
        ("5 TiB", 5 * 2**40),
        ("256 MiB", 256 * 2**20),
        ("1.5 KiB", 1536),  # a fraction of a unit is fine when the bytes are whole
        ("0.25 MB", 250_000),
        ("1.1 GB", 1_100_000_000),
        ("1e3 B", 1000),
        ("450GB", 450 * 10**9),  # no space between number and unit
        ("  64 KiB  ", 64 * 2**10),  # surrounding whitespace
    ],
)
def test_parse_size_bytes_units(text: str, expected: int) -> None:
    value = parse_size_bytes(text)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("1K", 2**10),  # nccl-tests' -b/-e: bare suffixes are binary
        ("8K", 8 * 2**10),
        ("1M", 2**20),
        ("128M", 128 * 2**20),
        ("8G", 8 * 2**30),
        ("1T", 2**40),
        ("1.5M", 3 * 2**19),
        ("4 G", 4 * 2**30),  # a space before the bare suffix
    ],
)
def test_parse_size_bytes_nccl_tests_suffixes_are_binary(text: str, expected: int) -> None:
    assert parse_size_bytes(text) == expected


def test_bare_suffix_differs_from_decimal_unit() -> None:
    assert parse_size_bytes("1K") == 1024
    assert parse_size_bytes("1 KB") == 1000
    assert parse_size_bytes("1 KiB") == 1024
    assert parse_size_bytes("1G") == parse_size_bytes("1 GiB") != parse_size_bytes("1 GB")


@pytest.mark.parametrize("value", [0, 1, 7, 2**33])
def test_parse_size_bytes_plain_int(value: int) -> None:
    assert parse_size_bytes(value) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-8", "size '-8' is negative"),
        ("-1 KiB", "size '-1 KiB' is negative"),
        ("-2K", "size '-2K' is negative"),
    ],
)
def test_negative_size_rejected(text: str, message: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(text)
    assert _one_line(error) == message


def test_negative_int_size_rejected() -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(-5)
    assert _one_line(error) == "size -5 is negative"


@pytest.mark.parametrize(
    "text",
    [
        "0.5 B",
        "1.5",
        "0.1K",  # 102.4 B
        "3.3 KiB",  # 3379.2 B
        "1.2 GiB",  # 1288490188.8 B
    ],
)
def test_fractional_bytes_rejected(text: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(text)
    assert _one_line(error) == f"size {text!r} is not a whole number of bytes"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4.1 MB", 4_100_000), ("8.2 GB", 8_200_000_000), ("1.005 KB", 1005), ("1.001 MB", 1_001_000)],
)
def test_decimal_fraction_of_a_decimal_unit_is_whole_bytes(text: str, expected: int) -> None:
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize("value", [True, False])
def test_boolean_size_rejected(value: bool) -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(value)  # type: ignore[arg-type]
    assert _one_line(error) == f"expected a size in bytes, got {value!r}"


@pytest.mark.parametrize("value", [None, 5.0, [8]])
def test_non_string_non_int_size_rejected(value: object) -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(value)  # type: ignore[arg-type]
    assert _one_line(error) == f"expected a size in bytes, got {value!r}"


@pytest.mark.parametrize("text", ["1e999", "1e999K"])
def test_infinite_size_rejected_as_unit_error(text: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_size_bytes(text)
    assert "finite" in _one_line(error)


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 s", 1.0),
        ("2.5 s", 2.5),
        ("2 ms", 2 * 1e-3),
        ("0.7 us", 0.7 * 1e-6),
        ("0.7 \u00b5s", 0.7 * 1e-6),  # MICRO SIGN
        ("5 ns", 5 * 1e-9),
        ("250ns", 250 * 1e-9),
        ("1e-3 s", 1e-3),
    ],
)
def test_parse_time_s(text: str, expected: float) -> None:
    assert parse_time_s(text) == pytest.approx(expected, rel=1e-12)


def test_micro_sign_and_us_agree() -> None:
    assert parse_time_s("3 \u00b5s") == parse_time_s("3 us")


# --- bandwidths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("450 GB/s", 450 * 1e9),
        ("300 GB/s", 300 * 1e9),
        ("400 Gbit/s", 400 * 1e9 / 8),
        ("200 Gbit/s", 200 * 1e9 / 8),
        ("25 Gbit/s", 25 * 1e9 / 8),
        ("100 MB/s", 100 * 1e6),
        ("1.6 Tbit/s", 1.6 * 1e12 / 8),
        ("25 GiB/s", 25 * 2**30),
        ("1 TB/s", 1e12),
        ("800 Mbit/s", 800 * 1e6 / 8),
    ],
)
def test_parse_bandwidth_bytes_per_s(text: str, expected: float) -> None:
    assert parse_bandwidth_bytes_per_s(text) == pytest.approx(expected, rel=1e-12)


def test_bits_are_an_eighth_of_bytes() -> None:
    assert parse_bandwidth_bytes_per_s("8 Gbit/s") == pytest.approx(
        parse_bandwidth_bytes_per_s("1 GB/s"), rel=1e-12
    )


# --- plain numbers: already in base units -----------------------------------------------


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (parse_time_s, 0.5),
        (parse_time_s, 3),
        (parse_bandwidth_bytes_per_s, 1e9),
        (parse_bandwidth_bytes_per_s, 7),
    ],
)
def test_plain_numbers_are_base_units(parse, value: float) -> None:  # type: ignore[no-untyped-def]
    assert parse(value) == float(value)
    assert parse(str(value)) == float(value)


@pytest.mark.parametrize(
    ("expect", "text", "expected"),
    [
        ("bytes", "1.5 KiB", 1536.0),
        ("seconds", "2 ms", 2e-3),
        ("bytes_per_s", "25 Gbit/s", 25 * 1e9 / 8),
        ("bytes", 64, 64.0),
    ],
)
def test_parse_quantity(expect, text, expected: float) -> None:  # type: ignore[no-untyped-def]
    assert parse_quantity(text, expect=expect) == pytest.approx(expected, rel=1e-12)


# --- ambiguous bit/byte spellings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("25 Gbps", "unit 'Gbps' is ambiguous (bits or bytes?): write '25 Gbit/s' or '25 GB/s'"),
        (
            "400 GBps",
            "unit 'GBps' is ambiguous (bits or bytes?): write '400 Gbit/s' or '400 GB/s'",
        ),
        (
            "100 Gb/s",
            "unit 'Gb/s' is ambiguous (bits or bytes?): write '100 Gbit/s' or '100 GB/s'",
        ),
        (
            "2.5 Mbps",
            "unit 'Mbps' is ambiguous (bits or bytes?): write '2.5 Mbit/s' or '2.5 MB/s'",
        ),
        ("10 Tb/s", "unit 'Tb/s' is ambiguous (bits or bytes?): write '10 Tbit/s' or '10 TB/s'"),
    ],
)
def test_ambiguous_bandwidth_units_rejected(text: str, message: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_bandwidth_bytes_per_s(text)
    assert _one_line(error) == message


# --- unknown units and wrong dimensions ----------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (
            parse_size_bytes,
            "5 XB",
            "unknown unit 'XB' in '5 XB'; expected bytes, e.g. '256 MiB', '1 GB'",
        ),
        (
            parse_time_s,
            "5 min",
            "unknown unit 'min' in '5 min'; expected seconds, e.g. '0.7 us', '2 ms'",
        ),
        (
            parse_bandwidth_bytes_per_s,
            "5 furlongs/s",
            "unknown unit 'furlongs/s' in '5 furlongs/s'; expected bytes_per_s, "
            "e.g. '450 GB/s', '400 Gbit/s'",
        ),
    ],
)
def test_unknown_unit_rejected(parse, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnitError) as error:
        parse(text)
    assert _one_line(error) == message


def test_time_given_as_bandwidth_rejected() -> None:
    with pytest.raises(UnitError) as error:
        parse_bandwidth_bytes_per_s("5 us")
    assert _one_line(error) == (
        "unknown unit 'us' in '5 us'; expected bytes_per_s, e.g. '450 GB/s', '400 Gbit/s'"
    )


@pytest.mark.parametrize(
    ("parse", "text", "wanted"),
    [
        (parse_bandwidth_bytes_per_s, "300 GB", "bytes_per_s"),  # forgot the /s
        (parse_time_s, "300 GB/s", "seconds"),
        (parse_time_s, "1 KiB", "seconds"),
        (parse_size_bytes, "5 ms", "bytes"),
        (parse_size_bytes, "5 GB/s", "bytes"),
    ],
)
def test_wrong_dimension_rejected(parse, text: str, wanted: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnitError) as error:
        parse(text)
    line = _one_line(error)
    assert line.startswith("unknown unit")
    assert f"expected {wanted}" in line
    assert repr(text) in line


@pytest.mark.parametrize("text", ["abc", "", "GB/s", "fast", "1,000 B"])
def test_unreadable_quantity_rejected(text: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_quantity(text, expect="bytes")
    line = _one_line(error)
    assert repr(text) in line or "unknown unit" in line


def test_unreadable_quantity_message() -> None:
    with pytest.raises(UnitError) as error:
        parse_time_s("fast")
    assert _one_line(error) == "cannot read 'fast' as a number with a unit"


# --- NaN, infinity, booleans, other types ------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("expect", ["bytes", "seconds", "bytes_per_s"])
def test_non_finite_numbers_rejected(value: float, expect) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnitError) as error:
        parse_quantity(value, expect=expect)
    assert _one_line(error) == f"{value!r} is not a finite number"


def test_overflowing_string_rejected() -> None:
    with pytest.raises(UnitError) as error:
        parse_bandwidth_bytes_per_s("1e999 GB/s")
    assert _one_line(error) == "'1e999 GB/s' is not a finite number"


@pytest.mark.parametrize("text", ["nan", "inf", "nan GB/s", "inf us", "-inf s"])
def test_nan_and_inf_strings_rejected(text: str) -> None:
    with pytest.raises(UnitError) as error:
        parse_quantity(text, expect="bytes_per_s" if "/" in text else "seconds")
    assert repr(text) in _one_line(error)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("expect", ["bytes", "seconds", "bytes_per_s"])
def test_booleans_rejected(value: bool, expect) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnitError) as error:
        parse_quantity(value, expect=expect)
    assert _one_line(error) == f"expected a quantity in {expect}, got a boolean"


def test_boolean_time_rejected() -> None:
    with pytest.raises(UnitError):
        parse_time_s(True)
    with pytest.raises(UnitError):
        parse_bandwidth_bytes_per_s(False)


def test_other_types_rejected() -> None:
    with pytest.raises(UnitError) as error:
        parse_quantity(None, expect="seconds")  # type: ignore[arg-type]
    assert _one_line(error) == "expected a quantity in seconds, got NoneType"


def test_unit_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        parse_bandwidth_bytes_per_s("1 Gbps")


# --- formatters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size_bytes", "text"),
    [
        (0, "0 B"),
        (8, "8 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (2**20, "1 MiB"),
        (256 * 2**20, "256 MiB"),
        (2**30, "1 GiB"),
        (8 * 2**30, "8 GiB"),
        (3 * 2**40, "3 TiB"),
        (2**50, "1024 TiB"),
    ],
)
def test_format_bytes(size_bytes: int, text: str) -> None:
    assert format_bytes(size_bytes) == text


@pytest.mark.parametrize("size_bytes", [8, 1024, 1536, 2**20, 2**30, 3 * 2**40])
def test_format_bytes_round_trips(size_bytes: int) -> None:
    assert parse_size_bytes(format_bytes(size_bytes)) == size_bytes


@pytest.mark.parametrize(
    ("time_s", "text"),
    [
        (3.0, "3 s"),
        (1.0, "1 s"),
        (0.0125, "12.5 ms"),
        (1e-3, "1 ms"),
        (2.5e-6, "2.5 us"),
        (1e-6, "1 us"),
        (999e-9, "999 ns"),
        (0.0, "0 ns"),
    ],
)
def test_format_time(time_s: float, text: str) -> None:
    assert format_time(time_s) == text


@pytest.mark.parametrize("time_s", [3.0, 0.0125, 2.5e-6, 999e-9])
def test_format_time_round_trips(time_s: float) -> None:
    assert parse_time_s(format_time(time_s)) == pytest.approx(time_s, rel=1e-12)


@pytest.mark.parametrize(
    ("bandwidth", "text"),
    [
        (450 * 1e9, "450 GB/s"),
        (400 * 1e9 / 8, "50 GB/s"),
        (235.26e9, "235.3 GB/s"),  # four significant digits
        (1.5e9, "1.5 GB/s"),
    ],
)
def test_format_bandwidth(bandwidth: float, text: str) -> None:
    assert format_bandwidth(bandwidth) == text


def test_format_bandwidth_round_trips() -> None:
    assert parse_bandwidth_bytes_per_s(format_bandwidth(300e9)) == 300e9
