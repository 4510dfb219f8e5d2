"""The typed-field checker behind benchmarks.toml and the command line."""

from __future__ import annotations

import math

import pytest

from amp_suite.schema import Field, FlagValueError, check_name, check_table, check_value, number_parser
from suite_cli import one_line_error as _error

FIELDS = {
    "input_size": Field(int, minimum=1, maximum=4096),
    "learning_rate": Field(float, above=0),
    "channels_last": Field(bool),
    "optimizer": Field(str, choices=("adam", "sgd")),
    "frameworks": Field(tuple, names=True),
    "description": Field(str, empty=True),
    "batch_size": Field(int, minimum=1, optional=True),
}


def test_a_good_table_comes_back_normalized():
    checked = check_table({"input_size": 28, "learning_rate": 1, "channels_last": False, "optimizer": "sgd",
                           "frameworks": ["torch", "jax"], "description": ""}, FIELDS, "[workloads.a]")
    assert checked == {"input_size": 28, "learning_rate": 1.0, "channels_last": False, "optimizer": "sgd",
                       "frameworks": ("torch", "jax"), "description": ""}
    assert isinstance(checked["learning_rate"], float)


@pytest.mark.parametrize("table,needle", [
    ({"input_size": "ten"}, "[workloads.a] input_size must be an integer, got 'ten'"),
    ({"input_size": 28.9}, "input_size must be an integer, got 28.9"),
    ({"input_size": True}, "input_size must be an integer, got True"),
    ({"input_size": [1, 2]}, "input_size must be an integer, got [1, 2]"),
    ({"input_size": 0}, "input_size must be >= 1, got 0"),
    ({"input_size": 10**6}, "input_size must be <= 4096, got 1000000"),
    ({"learning_rate": math.nan}, "learning_rate must be a finite number, got nan"),
    ({"learning_rate": math.inf}, "learning_rate must be a finite number, got inf"),
    ({"learning_rate": 0}, "learning_rate must be > 0, got 0.0"),
    ({"learning_rate": 10**400}, "learning_rate is too large"),
    ({"learning_rate": "big"}, "learning_rate must be a number, got 'big'"),
    ({"channels_last": "false"}, "channels_last must be true or false, got 'false'"),
    ({"channels_last": 0}, "channels_last must be true or false, got 0"),
    ({"optimizer": "adamw"}, "optimizer must be one of adam, sgd; got 'adamw' (did you mean 'adam'?)"),
    ({"optimizer": ""}, "optimizer must not be empty"),
    ({"optimizer": "a\0b"}, "must not contain a NUL character"),
    ({"frameworks": "torch"}, "frameworks must be a list of strings, got 'torch'"),
    ({"frameworks": []}, "frameworks must name at least one"),
    ({"frameworks": ["torch", "torch"]}, "frameworks lists 'torch' more than once"),
    ({"frameworks": ["a|b"]}, "may hold only letters, digits"),
    ({"frameworks": [3]}, "frameworks must be a string, got 3"),
    ({"batchsize": 3}, "unknown key 'batchsize' (did you mean 'batch_size'?); allowed: input_size"),
    ({"learning_rat": 3}, "unknown key 'learning_rat' (did you mean 'learning_rate'?)"),
    ({"zzz": 3}, "unknown key 'zzz'; allowed:"),
])
def test_bad_values_are_one_line(table, needle):
    assert needle in _error(lambda: check_table(table, FIELDS, "[workloads.a]"))


def test_a_table_that_is_not_a_table():
    assert _error(lambda: check_table(3, FIELDS, "workloads.mnist_cnn")) == "workloads.mnist_cnn must be a table, got 3"


def test_optional_values():
    assert check_value("batch_size", None, FIELDS["batch_size"]) is None
    assert "got nothing" in _error(lambda: check_value("input_size", None, FIELDS["input_size"]))


@pytest.mark.parametrize("name,ok", [
    ("mnist_cnn", True), ("cifar10-cnn.v2", True), ("a" * 64, True),
    ("a" * 65, False), ("", False), ("a|b", False), ("a\nb", False), ("a\0b", False), ("../x", False),
    ("a/b", False), (".hidden", False), ("-flag", False), ("a b", False), (3, False),
])
def test_names_fit_file_names_and_tables(name, ok):
    if ok:
        assert check_name("workload", name) == name
    else:
        _error(lambda: check_name("workload", name))


def test_long_values_are_cut_in_messages():
    message = _error(lambda: check_value("out", "x" * 10_000, Field(int)))
    assert len(message) < 200


@pytest.mark.parametrize(("field", "text", "message"), [
    (Field(int, minimum=1, maximum=1000), "abc", "'abc' is not a whole number (allowed: 1 to 1000)"),
    (Field(int, minimum=1, maximum=1000), "2.5", "'2.5' is not a whole number (allowed: 1 to 1000)"),
    (Field(int, minimum=0), "-", "'-' is not a whole number (allowed: 0 or more)"),
    (Field(float, above=0), "10s", "'10s' is not a number (allowed: above 0)"),
    (Field(float, above=0, maximum=60), "x", "'x' is not a number (allowed: above 0 to 60)"),  # as check_value says
    (Field(float), "", "'' is not a number"),
])
def test_a_flag_text_that_is_no_number_names_what_the_field_allows(field, text, message):
    with pytest.raises(FlagValueError) as refused:
        number_parser(field)(text)
    assert str(refused.value) == message


def test_a_number_flag_parses_its_kind_and_leaves_the_bounds_to_the_field_check():
    assert number_parser(Field(int, minimum=1))("7") == 7
    assert number_parser(Field(float, above=0))("0.5") == 0.5
    assert number_parser(Field(int, minimum=1))("0") == 0  # the range is judged with the field, naming the setting
    long_text = "9" * 5000  # past Python's digit limit for int(): refused, and shown cut short
    with pytest.raises(FlagValueError) as refused:
        number_parser(Field(int, minimum=1, maximum=10))(long_text)
    assert len(str(refused.value)) < 200
