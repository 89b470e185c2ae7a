"""The registry's loaders (a package's load_all, run on demand) and the lazy package names."""

from __future__ import annotations

import pytest

from securevfl.errors import UnknownNameError
from securevfl.registry import add_loader, load_all_of, loads_on_demand, lookup, names, register


def test_a_loader_runs_for_a_name_not_registered_and_before_listing():
    calls = []

    def load() -> None:  # like a package's load_all: cheap to call again
        calls.append(1)
        register("test-kind-a", "late", "the late one")

    register("test-kind-a", "early", "the early one")
    add_loader("test-kind-a", load)
    add_loader("test-kind-a", load)  # once only
    assert lookup("test-kind-a", "early") == "the early one" and calls == []
    assert lookup("test-kind-a", "late") == "the late one" and calls == [1]
    assert names("test-kind-a") == ["early", "late"] and len(calls) == 2
    with pytest.raises(UnknownNameError, match="unknown test-kind-a 'missing'; known: early, late"):
        lookup("test-kind-a", "missing")
    assert loads_on_demand(load)
    assert not loads_on_demand(lambda: None)


def test_load_all_of_leaves_an_on_demand_package_to_the_registry():
    import types

    calls = []
    own = types.SimpleNamespace(load_all=lambda: calls.append("own"))
    lazy = types.SimpleNamespace(load_all=lambda: calls.append("lazy"))
    add_loader("test-kind-b", lazy.load_all)
    assert load_all_of(own, on_demand=True) and calls == ["own"]  # a user's: loaded
    assert not load_all_of(lazy, on_demand=True) and calls == ["own"]
    assert load_all_of(lazy) and calls == ["own", "lazy"]
    assert load_all_of(types.SimpleNamespace())  # nothing to load


def test_the_method_packages_load_on_demand():
    import baselines
    import securevfl.methods

    assert loads_on_demand(securevfl.methods.load_all) and loads_on_demand(baselines.load_all)
    assert {"vfl", "hdp-vfl", "he-vfl", "pbm-vfl"} <= set(names("method"))


@pytest.mark.parametrize("package", ["securevfl", "securevfl.training", "securevfl.privacy"])
def test_lazy_package_names_resolve_and_are_listed(package):
    import importlib

    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name
    assert set(mod.__all__) <= set(dir(mod))
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        mod.no_such_name  # noqa: B018
