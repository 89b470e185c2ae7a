"""Empirical privacy audits: a statistical lower bound on ε from the code as it runs."""

from securevfl.audit.release import ReleaseProbe, has_release_probe, release_probe
from securevfl.audit.release_audit import audit_release_once, held_out_bound
from securevfl.audit.run import AuditConfig, audit
from securevfl.audit.stats import (
    best_threshold,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    fit_direction,
    one_run_epsilon_lower_bound,
)

__all__ = [
    "AuditConfig",
    "ReleaseProbe",
    "audit",
    "audit_release_once",
    "best_threshold",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "fit_direction",
    "has_release_probe",
    "held_out_bound",
    "one_run_epsilon_lower_bound",
    "release_probe",
]
