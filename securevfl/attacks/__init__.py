"""Attacks that audit a method from what one party actually saw (its recorded view).

Label inference by a passive party (``label-norm``, ``label-direction``, ``model-completion``),
feature inversion by the label holder (``inversion``), membership inference on the trained
model's outputs (``membership``, ``membership-loss``). See :func:`run_attack`.
"""

from securevfl.attacks.run import AttackConfig, attack_names, run_attack

__all__ = ["AttackConfig", "attack_names", "run_attack"]
