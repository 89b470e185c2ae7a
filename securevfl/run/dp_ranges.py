"""The DP scaling ranges of a ``csv:`` run with an ε and no ``--bounds``, as one run sets them.

:mod:`securevfl.privacy.dp_bounds` states the release (a noisy histogram per party on a public
grid), its sensitivity and the share. This module fixes the run's plan from its public settings
(the same in every process), gives each party its own noise generator, sets the method's ε
aside and composes the releases into the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from securevfl.context import PublicInfo, RunSpec, has_budget, noise_seed
from securevfl.data.bounds import DpRanges
from securevfl.data.custom import is_csv_dataset
from securevfl.methods.base import Method
from securevfl.privacy.centring import reserve as centring_reserve
from securevfl.privacy.dp_bounds import BOUNDS_SHARE, BoundsPlan, compose_bounds, plan_bounds
from securevfl.rng import make_noise_rng

DEFAULT_DELTA = 1e-5  # the δ the share is sized at when the run names none


def bounds_plan(spec: RunSpec, method: Method) -> BoundsPlan | None:
    """The plan of a ``csv:`` run with an ε (a party with its own --bounds does not use it);
    None otherwise: a catalogue dataset has public domains, a run without an ε claims no
    privacy and keeps each column's exact min/max."""
    if not (has_budget(spec) and is_csv_dataset(str(spec.dataset))):
        return None
    eps = float(spec.epsilon)
    if spec.center and not method.composes_centring(spec):  # the means' basic share first
        eps -= centring_reserve(eps, method.centre_share(spec))
    return plan_bounds(
        eps,
        float(spec.delta or DEFAULT_DELTA),
        unit=method.privacy_unit,
        parties=spec.parties,
        share=BOUNDS_SHARE if spec.bounds_share is None else float(spec.bounds_share),
        pure=method.pure_dp,
        seed=noise_seed(spec),
    )


def party_rng(plan: BoundsPlan, party: int) -> Any:
    """Party k's generator of its bounds noise (the CSPRNG unless the noise is seeded)."""
    return make_noise_rng(plan.seed, purpose="noise/bounds", party=party)


def dp_ranges_of(spec: RunSpec, method: Method) -> Callable[[int], DpRanges] | None:
    """Party k's plan and generator in a run whose parties release DP ranges (else None)."""
    plan = bounds_plan(spec, method)
    if plan is None or spec.bounds is not None:
        return None
    return lambda k: DpRanges(plan, party_rng(plan, k))


def method_spec(spec: RunSpec, method: Method, info: PublicInfo, fit_spec: RunSpec) -> RunSpec:
    """``fit_spec`` with the bounds' share set aside when parties released DP ranges."""
    plan = bounds_plan(spec, method) if info.dp_bounds else None
    if plan is None:
        return fit_spec
    return dataclasses.replace(fit_spec, epsilon=plan.epsilon_method)


def compose_into_record(
    privacy: dict[str, Any], spec: RunSpec, method: Method, info: PublicInfo, runs: int = 1
) -> dict[str, Any]:
    """The record's ``privacy`` with the parties' bounds releases composed (``runs``: a resumed
    run's earlier runs released them too, under fresh noise)."""
    plan = bounds_plan(spec, method) if info.dp_bounds else None
    if plan is None:
        return privacy
    out = compose_bounds(privacy, plan, list(info.dp_bounds), runs=runs)
    out["target_epsilon"] = float(spec.epsilon)  # the run's, not the method's part of it
    return out
