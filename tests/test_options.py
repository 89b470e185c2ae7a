"""Declarative options: rules in words, parsing, open/closed ranges, finiteness, `when`."""

import pytest

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, check_declaration
from securevfl.options import Option, parse_bool
from securevfl.run_options import build_spec


def test_rules_read_as_written():
    assert Option(float, 0.25, "", gt=0, le=0.25).rule() == "in (0, 0.25]"
    assert Option(int, 1, "", ge=1).rule() == ">= 1"
    assert Option(str, "a", "", choices=("a", "b")).rule() == "one of a, b"
    assert "integer in [1, 4096]; default 64" in Option(int, 64, "b", ge=1, le=4096).describe()


@pytest.mark.parametrize(
    "opt, value, message",
    [
        (Option(float, 1.0, "", gt=0), 0, "x must be > 0, got 0.0"),
        (Option(float, 1.0, "", gt=0), "nan", "x must be finite, > 0, got nan"),
        (Option(float, 1.0, "", ge=0), float("inf"), "x must be finite, >= 0, got inf"),
        (Option(float, 1.0, "", gt=0, lt=1), 1, "x must be < 1, got 1.0"),
        (Option(int, 1, "", ge=1), 2.0, "x must be an integer >= 1, got 2.0"),  # no truncation
        (Option(int, 1, "", ge=1), True, "x must be an integer >= 1, got True"),
        (Option(int, 1, ""), 10**400, None),  # a huge int is an int; a float would overflow
        (Option(float, 1.0, ""), 10**400, "x must be a number, got 1"),
        (Option(str, "a", "", choices=("a", "b")), "c", "x must be one of a, b, got 'c'"),
        (Option(parse_bool, True, ""), "maybe", "x: a boolean option must be true or false"),
    ],
)
def test_check_names_the_rule_and_the_value(opt, value, message):
    if message is None:
        assert opt.check("x", value) == value
        return
    with pytest.raises(ConfigError) as info:
        opt.check("x", value)
    assert str(info.value).startswith(message)


def test_closed_ends_accept_their_bound_and_values_are_parsed():
    opt = Option(float, 0.25, "", ge=2.0**-12, le=0.25)
    assert opt.check("beta", "0.25") == 0.25 and opt.check("beta", 2.0**-12) == 2.0**-12
    assert Option(int, 1, "", ge=1).check("b", " 7 ") == 7


def test_build_spec_parses_checks_and_routes_flat_values():
    spec = build_spec({"method": "pbm-vfl", "epochs": "2", "b": "16", "n": "100"})
    assert isinstance(spec, RunSpec) and spec.epochs == 2 and spec.model == "mlp"
    assert spec.options == {"b": 16} and spec.dataset_options == {"n": 100}
    with pytest.raises(ConfigError, match="option --b does not apply to method 'vfl'"):
        build_spec({"method": "vfl", "b": 16})
    with pytest.raises(ConfigError, match=r"b must be <= 1024 \(method 'pbm-vfl'\)"):
        build_spec({"method": "pbm-vfl", "b": 10**6})


def test_a_declaration_is_checked_when_the_method_registers():
    class Shadow(Method):
        name = "shadow"
        options = {"epochs": Option(int, 1, "")}

        def fit(self, ctx): ...

    with pytest.raises(ConfigError, match="must not shadow a common option"):
        check_declaration(Shadow)
    Shadow.options = {"k": Option(int, 0, "", ge=1)}
    with pytest.raises(ConfigError, match="k must be >= 1"):
        check_declaration(Shadow)  # its default breaks its own rule


def test_run_help_shows_the_common_options_and_only_the_methods_own(capsys):
    assert main(["run", "hdp-vfl", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--epochs" in out and "--clip-norm" in out and "--paillier-bits" not in out
    assert "hdp-vfl's own: " in out and "--scheme" not in out


def test_a_name_two_methods_share_keeps_each_methods_rule(capsys):
    # --intercept: hdp-vfl takes clipped/free/none, fm-vfl a boolean; neither borrows the other's
    assert build_spec({"method": "hdp-vfl", "intercept": "free"}).options["intercept"] == "free"
    assert main(["run", "fm-vfl", "--epsilon", "1", "--intercept", "free"]) == 2
    assert "intercept (method 'fm-vfl'): a boolean option" in capsys.readouterr().err


def test_an_option_for_other_runs_of_the_method_is_refused(capsys):
    assert main(["run", "he-vfl", "--scheme", "ckks", "--paillier-bits", "2048"]) == 2
    err = capsys.readouterr().err
    assert "--paillier-bits of method 'he-vfl' applies with --scheme paillier" in err
