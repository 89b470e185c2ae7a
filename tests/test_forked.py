"""Party processes forked from the launcher's warm server behave as fresh interpreters do."""

import os
import sys

import pytest

from protocols import forked
from protocols.processes import run_group, spawn


def _env():
    """An environment the session's server can fork for (its start-time variables)."""
    forked.start_server(("json",))  # no-op where the session already started it
    return {"PATH": os.environ.get("PATH", ""), **forked.server_env()}


def _run(cmds, stdins, preload):
    return run_group(
        cmds,
        stdins,
        60,
        on_failure=lambda i, line: RuntimeError(f"{i}: {line}"),
        on_timeout=lambda: TimeoutError("timeout"),
        env=_env(),
        preload=preload,
    )


def test_a_forked_module_run_gets_its_stdin_stdout_and_exit_code_as_a_fresh_one(tmp_path):
    cmd = [sys.executable, "-m", "json.tool", "--compact"]
    with open(tmp_path / "err", "w+") as err:  # the warm path is the one taken below
        proc = spawn(cmd, stdin_data=b"[1]", stderr=err, env=_env(), preload=("json",))
        assert isinstance(proc, forked.ForkedProcess) and proc.wait(60) == 0
    data = [b'{"b": [1, 2], "a": "x"}', b'{"c": null}']
    warm = _run([cmd, cmd], data, preload=("json",))
    fresh = _run([cmd, cmd], data, preload=())
    assert warm == fresh == [b'{"b":[1,2],"a":"x"}\n', b'{"c":null}\n']
    # a failing module: the same last line of stderr names the error, whichever way it started
    bad = [b"{not json"]
    with pytest.raises(RuntimeError) as warm_err:
        _run([cmd], bad, preload=("json",))
    with pytest.raises(RuntimeError) as fresh_err:
        _run([cmd], bad, preload=())
    assert str(warm_err.value) == str(fresh_err.value) and "Expecting" in str(warm_err.value)


def test_changed_start_variables_or_another_program_get_a_fresh_interpreter():
    cmd = [sys.executable, "-m", "json.tool"]
    env = _env()
    assert forked.can_fork(cmd, env)
    assert forked.can_fork(cmd, dict(env, SECUREVFL_CACHE_DIR="/x"))  # read later: no matter
    assert not forked.can_fork(cmd, dict(env, PYTHONPATH="/elsewhere"))
    assert not forked.can_fork(cmd, dict(env, MALLOC_ARENA_MAX="1"))
    assert not forked.can_fork(["/bin/echo", "-m", "x"], env)


def test_mpyc_runtime_is_never_preloaded():
    """MPyC's runtime reads the party's -I/-P options from argv when it is imported: a server's
    copy would be configured for the server's argv, not the party's."""
    with pytest.raises(ValueError, match="mpyc.runtime"):
        forked.start([sys.executable, "-m", "json.tool"], (0, 1, 2), {}, ("mpyc.runtime",))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_a_killed_launcher_leaves_no_forked_party():
    """The launcher dies (SIGKILL): its server sees it and exits, and the party with it."""
    import signal
    import subprocess
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from protocols.processes import run_group\n"
        "run_group([[sys.executable, '-m', '_sleep_party']], [b''], 300,\n"
        "          on_failure=lambda i, l: RuntimeError(l), on_timeout=lambda: TimeoutError(),\n"
        "          preload=('json',))\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'tests'}")
    launcher = subprocess.Popen([sys.executable, "-c", code], env=env)
    party = None
    deadline = time.monotonic() + 60
    while party is None and time.monotonic() < deadline:
        for server in _children(launcher.pid):
            party = next(iter(_children(server)), None) or party
        time.sleep(0.1)
    assert party is not None, "no party forked"
    time.sleep(0.5)  # past its die_with_parent
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(30)
    deadline = time.monotonic() + 15
    while _alive(party) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(party), "a forked party outlived its launcher"
