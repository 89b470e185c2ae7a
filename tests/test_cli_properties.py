"""Property-based CLI test: bad and edge values for every method and option.

Every run either exits 2 with one line naming the rule, or exits 0 with one strict-JSON record
whose metrics are finite; never a traceback, never a hang (an alarm bounds each run).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.plugins import load_plugins
from securevfl.options import Option, dash
from securevfl.registry import lookup, names
from securevfl.run_options import COMMON_OPTIONS

load_plugins()
METHODS = names("method")
TINY = {"dataset": "synthetic-logistic", "n": "150", "d": "6", "epochs": "1", "seed": "0"}
ALWAYS_BAD = ("nan", "inf", "-inf", "1e308", "x", "")  # no option of any kind accepts these
RUN_LIMIT_S = 120  # a hang fails the test instead of stalling the suite


def bad_values(opt: Option) -> list[str]:
    """Values the option's rule refuses: outside its range, of the wrong kind, not a choice."""
    out = ["x", "nan", "inf", "1e308"]
    if opt.choices is not None:
        return out + ["nope", ""]
    if opt.type in (int, float):
        for low in (opt.gt, opt.ge):
            if low is not None:
                out.append(repr(low - 1 if opt.type is int else (low - abs(low) - 1)))
        for high in (opt.lt, opt.le):
            if high is not None:
                out.append(repr(high + 1 if opt.type is int else high * 2 + 1))
        if opt.type is int:
            out.append("1.5")
    return out


def edge_values(opt: Option) -> list[str]:
    """Values the rule accepts at its cheap edges (never ones that would make a run long)."""
    if opt.choices is not None:
        return [str(c) for c in opt.choices]
    out = [] if opt.default is None else [str(opt.default)]
    if opt.type in (int, float) and opt.ge is not None:
        out.append(str(opt.ge))
    return out


def options_of(method: str) -> dict[str, Option]:
    common = {
        k: v for k, v in COMMON_OPTIONS.items() if k not in ("timeout", "id_column", "center")
    }
    return {**common, **lookup("method", method).options}


def argv_for(method: str, name: str, value: str) -> list[str]:
    m = lookup("method", method)
    given = dict(TINY)
    if method.startswith("secureboost"):  # its defaults: 20 trees under a 2048-bit key
        given.update(trees="2", paillier_bits="256")
    if m.requires_epsilon:
        given["epsilon"] = "1"
    if method == "hdp-vfl":
        given["delta"] = "1e-5"
    if name in ("dataset",):  # another dataset: drop the synthetic sizes
        given.pop("n"), given.pop("d")
    given[name] = value
    argv = ["run", method, "--json"]
    for k, v in given.items():
        argv += [f"--{dash(k)}", v] if k != "center" else (["--center"] if v == "true" else [])
    return argv


def _alarm(signum, frame):
    raise TimeoutError(f"a CLI run took longer than {RUN_LIMIT_S} s")


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(RUN_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def _no_constant(token: str) -> float:
    raise AssertionError(f"not strict JSON: {token}")


def assert_clean(argv: list[str], code: int, out: str, err: str) -> None:
    assert "Traceback" not in err + out, argv
    if code == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("securevfl: error: "), (argv, err)
        return
    assert code == 0, (argv, code, err)
    lines = out.strip().splitlines()
    assert len(lines) == 1, argv
    record = json.loads(lines[0], parse_constant=_no_constant)
    assert all(math.isfinite(v) for v in record["metrics"].values()), (argv, record["metrics"])


@pytest.mark.parametrize("method", METHODS)
def test_every_option_refuses_its_bad_values_in_one_line(method):
    # the common options are the same for every method: swept once, with the first
    own = lookup("method", method).options
    opts = options_of(method) if method == METHODS[0] else own
    for name, opt in opts.items():
        for value in bad_values(opt):
            if opt.type is str and opt.choices is None and value in ("x", "nan", "inf", "1e308"):
                continue  # a free string: any text is a value (dataset names are checked later)
            argv = argv_for(method, name, value)
            code, out, err = run_cli(argv)
            assert code == 2, (" ".join(argv), code, err)
            assert_clean(argv, code, out, err)


@st.composite
def cli_case(draw) -> list[str]:
    method = draw(st.sampled_from(METHODS))
    opts = options_of(method)
    name = draw(st.sampled_from(sorted(opts)))
    opt = opts[name]
    pool = bad_values(opt) + edge_values(opt) + list(ALWAYS_BAD) + ["0", "-1", "1", "1e-300"]
    return argv_for(method, name, draw(st.sampled_from(pool)))


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,  # the same examples in CI every time: a failure is reproducible
    suppress_health_check=[HealthCheck.too_slow],
)
@given(argv=cli_case())
def test_generated_values_exit_2_in_one_line_or_0_with_a_finite_record(argv):
    code, out, err = run_cli(argv)
    assert_clean(argv, code, out, err)
