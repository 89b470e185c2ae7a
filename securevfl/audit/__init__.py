"""Empirical privacy audits: a statistical lower bound on ε from the code as it runs."""

from securevfl.audit.run import AuditConfig, audit
from securevfl.audit.stats import (
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    fit_direction,
    one_run_epsilon_lower_bound,
)

__all__ = [
    "AuditConfig",
    "audit",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "fit_direction",
    "one_run_epsilon_lower_bound",
]
