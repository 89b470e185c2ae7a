"""Steps 1-6 composed: the local parties open their data, receive the split, centre columns and
build their views (:func:`build_views`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from securevfl.context import (
    PartyView,
    PublicInfo,
    RunSpec,
)
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.run.centring import centre_columns
from securevfl.run.parties import Party
from securevfl.run.resident import prepare_resident, resident_run
from securevfl.run.steps import (
    open_parties,
    party_views,
    pooled_arrays,
    public_info,
    receive_split,
    split_from_label_holder,
    write_probe,
)
from securevfl.runtime.base import Runtime
from securevfl.runtime.inprocess import InProcessRuntime


def build_views(
    spec: RunSpec,
    method: Method,
    wanted: list[int],
    facts: dict[str, Any] | None = None,
    *,
    rt: Runtime | None = None,
) -> tuple[PublicInfo, dict[int, PartyView], Any]:
    """:func:`prepare_parties`, returning the local parties' views in place of their records."""
    info, parties, pooled = prepare_parties(spec, method, wanted, facts, rt=rt)
    return info, {k: p.view for k, p in parties.items()}, pooled


def prepare_parties(
    spec: RunSpec,
    method: Method,
    wanted: list[int],
    facts: dict[str, Any] | None = None,
    *,
    rt: Runtime | None = None,
) -> tuple[PublicInfo, dict[int, Party], Any]:
    """The parties in ``wanted`` take the steps before training (:mod:`securevfl.run.steps`):
    each opens its own data (metadata exchanged, rows aligned by PSI with --data files), the
    label holder's split is received, columns centred; returns the public facts, their records
    (each with its view) and (a method that may see pooled data only) the pooled arrays.

    ``rt``: the run's runtime (None: every party in this process, for tests and attacks).
    """
    if rt is None:
        rt = InProcessRuntime(method.n_parties(spec))
    if resident_run(spec, method):  # each party's table stays on its Dask engine
        return prepare_resident(spec, method, wanted, facts, rt)
    data = open_parties(spec, method, rt, wanted)
    split_of = split_from_label_holder(spec, method, rt)
    train, test, test_idx = receive_split(data, split_of)
    del data.ds  # its X now holds the split's rows
    if facts is not None:
        facts["feature_names"] = list(getattr(train, "feature_names", None) or [])
        facts["test_rows"] = [int(i) for i in test_idx]  # a saved model rescores its test split
    train, test = centre_columns(spec, method, train, test, data.blocks, wanted, facts)
    info = public_info(spec, method, train, test, data.blocks)
    party_views(data, train, test, info, method.pooled_data)
    write_probe(data, train, test)  # tests only: what this process holds
    if not method.pooled_data:
        return info, data.parties, _no_pooled(method)
    return info, data.parties, pooled_arrays(train, test, info.row_norm_bound_sq)


def _no_pooled(method: Method) -> Callable[[], Any]:
    def pooled():
        raise ConfigError(f"method {method.name!r} is federated: it may not see pooled data")

    return pooled


ViewsHook = Callable[[PublicInfo, dict[int, PartyView], Any], tuple[PublicInfo, dict, Any]]
