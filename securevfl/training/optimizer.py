"""The one way this project builds an optimizer: :func:`adam`, torch's Adam without torch._dynamo.

torch 2.13's optimizers reach ``torch._dynamo`` on their first use: ``Optimizer.add_param_group``,
``zero_grad``, ``state_dict`` and ``load_state_dict`` are wrapped in ``torch._disable_dynamo``,
whose wrapper imports it to mark them as not compilable, and ``step`` in
``_use_grad_for_differentiable``, which imports it to place graph breaks. Importing it costs
about 2 CPU-s, as much as torch itself, in every party process that trains; both wrappers only
matter inside ``torch.compile``, which securevfl never calls. So:

* the four methods get their plain function as the disable-wrapper's own cache
  (``__dynamo_disable``, looked up before the import): the wrapper then calls the method as
  ``torch._dynamo.disable`` would outside a compiled region;
* :class:`Adam` steps with torch's own step under ``torch.no_grad()``, which is what the
  step-wrapper does for a non-differentiable optimizer (grad mode set to
  ``defaults["differentiable"]``, False) apart from the graph breaks.

A run whose bottoms take per-example gradients (``torch.func``: the DP bottoms) still imports
it there; vfl, the cascades, the references and DP-SGD through Opacus no longer do.
The arithmetic is torch's, unchanged (``tests/test_optimizer.py`` checks the same parameters
after several steps). Where a torch release no longer has these wrappers, nothing is patched and
the decorated methods run as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

_WRAPPED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_patched = False


def _plain_disabled_methods() -> None:
    """Fill each wrapped Optimizer method's disable cache with its plain function (once)."""
    global _patched
    if _patched:
        return
    for name in _WRAPPED:
        plain = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if plain is not None and getattr(plain, "__dynamo_disable", None) is None:
            plain.__dynamo_disable = plain  # type: ignore[attr-defined]
    _patched = True


_ADAM_STEP: Callable[..., Any] = getattr(
    torch.optim.Adam.step, "__wrapped__", torch.optim.Adam.step
)


class Adam(torch.optim.Adam):
    """torch's Adam, stepping without the graph-break wrapper (see the module docstring)."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        with torch.no_grad():
            return _ADAM_STEP(self, closure)


def adam(params: Iterable[Any], lr: float, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, lr=lr, **kwargs)``, without importing torch._dynamo."""
    _plain_disabled_methods()
    return Adam(params, lr=lr, **kwargs)
