"""Units mean what they say: the ``sample`` unit (a row and its label) needs protected labels.

In split learning every data party receives, for each of its rows, the exact gradient of the
loss at that row: it depends on the row's label, so a party can read the label off it. A
``sample`` ε would then be a claim about the label that the run does not keep. Until the label is
protected (label DP on what goes back, e.g. randomized-response labels released once), a method
drops the unit from its report and lists the labels' exposure instead.
"""

from __future__ import annotations

import dataclasses

from securevfl.privacy.events import PrivacyReport

LABEL_EXPOSURE = (
    "the labels: every data party receives its rows' exact label-dependent gradients "
    "(split learning), so no sample-unit ε (a row and its label) is claimed"
)


def label_unit(report: PrivacyReport, *, labels_protected: bool) -> PrivacyReport:
    """``report`` unchanged where the labels are protected; else without the ``sample`` unit
    (in ``by_unit``) and with :data:`LABEL_EXPOSURE` under ``outside_guarantee``."""
    if labels_protected:
        return report
    extra = dict(report.extra)
    if isinstance(extra.get("by_unit"), dict):
        extra["by_unit"] = {u: v for u, v in extra["by_unit"].items() if u != "sample"}
    outside = report.outside_guarantee
    if LABEL_EXPOSURE not in outside:
        outside = (*outside, LABEL_EXPOSURE)
    return dataclasses.replace(report, extra=extra, outside_guarantee=outside)
