"""The one configuration mechanism: YAML + --set onto typed dataclasses, help from metadata."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from vqa_r1.errors import UserError
from vqa_r1.typed_config import (
    build,
    help_text,
    load_mapping,
    markdown_table,
    option,
    parse_overrides,
    read_bool,
    to_dict,
)


@dataclass
class Inner:
    count: int = option(1, help="how many", minimum=0)
    mode: Literal["auto", "on", "off"] = option("auto", help="a choice")
    name: str = option("x", help="free text")
    flag: bool = option(True, help="a switch")
    items: list[str] = option(default_factory=list, help="a list")
    rate: float | None = option(None, help="optional number")


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    time: str = option("12:00:00", help="a SLURM time")


@dataclass(frozen=True)
class Frozen:
    name: str = option(help="required")
    minutes: int = option(0, help="parsed", parse=lambda raw: int(str(raw).split("h")[0]) * 60)


def test_command_line_values_are_typed_by_their_field_and_strings_stay_strings():
    got = build(
        Outer,
        parse_overrides(
            ["inner.count=0x10", "inner.mode=off", "inner.name=on", "inner.flag=no"]
            + ["inner.items=a,b", "inner.rate=none", "time=01:00:00"]
        ),
    )
    assert got == Outer(Inner(16, "off", "on", False, ["a", "b"], None), "01:00:00")
    assert type(got.inner.mode) is str and type(got.inner.name) is str  # plain str, dumpable
    assert build(Outer, parse_overrides(["inner.items=[c, d]"])).inner.items == ["c", "d"]


def test_yaml_reads_only_true_false_as_booleans_and_no_base_60_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner: {mode: off, name: yes, rate: 1e-4, flag: false}\ntime: 12:00:00\n")
    got = build(Outer, load_mapping(path), f"{path}:")
    assert got.inner.mode == "off" and got.inner.name == "yes" and got.inner.flag is False
    assert got.inner.rate == 1e-4 and got.time == "12:00:00"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["inner.count=-1"], "inner.count: must be at least 0, got -1"),
        (["inner.mode=of"], "inner.mode: expected one of auto, on, off, got 'of'"),
        (["inner.cnt=1"], "unknown key 'inner.cnt'; valid keys here: count, flag, items"),
        (["inner.flag=maybe"], "inner.flag: expected true or false"),
        (["inner.count=1.5"], "inner.count: expected int"),
        (["inner=3"], "inner: expected a mapping of count, flag"),
        (["nonsense"], "expected key=value"),
    ],
)
def test_bad_values_name_their_key(override, message):
    with pytest.raises(UserError) as caught:
        build(Outer, parse_overrides(override))
    assert message in str(caught.value)


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("inner: [unclosed\n")
    with pytest.raises(UserError, match=f"{path}: not valid YAML"):
        load_mapping(path)
    path.write_text("inner: {count: true}\n")
    with pytest.raises(UserError, match=rf"{path}: inner.count: expected int"):
        build(Outer, load_mapping(path), f"{path}:")


def test_a_key_written_twice_is_an_error_naming_the_file_and_line(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("inner:\n  count: 1\n  label: a\n  count: 2\n")
    with pytest.raises(UserError) as caught:
        load_mapping(path)
    message = str(caught.value)
    assert f"{path}: not valid YAML at line 4:" in message and "'count' appears twice" in message
    assert "first on line 2" in message and "\n" not in message
    path.write_text("inner: {count: 1, count: 2}\n")  # one line, a flow mapping
    with pytest.raises(UserError, match="'count' appears twice"):
        load_mapping(path)
    # the same key in two mappings, and a merge key's value overridden, are not duplicates
    path.write_text("a: &x {count: 1}\nb:\n  <<: *x\n  count: 2\nc: {count: 3}\n")
    assert load_mapping(path) == {"a": {"count": 1}, "b": {"count": 2}, "c": {"count": 3}}


def test_frozen_dataclass_parse_hook_and_required_keys():
    assert build(Frozen, {"name": "a", "minutes": "2h"}) == Frozen("a", 120)
    with pytest.raises(UserError, match="missing key"):
        build(Frozen, {"minutes": 1})
    with pytest.raises(UserError, match="minutes: invalid literal"):
        build(Frozen, {"name": "a", "minutes": "soon"})


def test_round_trip_through_plain_data():
    got = build(Outer, parse_overrides(["inner.items=p", "inner.rate=0.5"]))
    assert build(Outer, to_dict(got)) == got


@pytest.mark.parametrize(
    ("value", "strict", "expected"),
    [
        (True, False, True),
        ("Yes", False, True),
        ("off", False, False),
        (0, False, False),
        ("yes", True, None),
        (" TRUE ", True, True),
        ("maybe", False, None),
        (2, False, None),
    ],
)
def test_read_bool(value, strict, expected):
    assert read_bool(value, strict=strict) is expected


def test_help_and_docs_come_from_the_field_metadata():
    text = help_text(Outer)
    assert "inner.mode (auto|on|off, default auto)\n      a choice" in text
    assert "inner.rate (float | none, default none)" in text
    table = markdown_table(Outer)
    assert "| `inner.items` | list of str | `[]` | a list |" in table
