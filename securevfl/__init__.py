"""securevfl: privacy-preserving vertical federated learning, DP, MPC and HE side by side.

Typical use::

    import baselines, securevfl
    baselines.load_all()                      # register the plain/HE baselines too
    record = securevfl.run_experiment(securevfl.RunSpec(method="vfl", dataset="breast"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from securevfl.lazy import lazy_exports
from securevfl.version import __version__

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from securevfl.context import Option, RunContext, RunSpec
    from securevfl.data import list_datasets, load_dataset, partition_columns, train_test_split
    from securevfl.errors import (
        ConfigError,
        DataError,
        PartyTimeoutError,
        ProtocolError,
        SecureVFLError,
        UnknownNameError,
    )
    from securevfl.experiment import run_experiment, run_in_processes
    from securevfl.methods.base import Method, register_method
    from securevfl.model.predict import Model, Prediction, load_model
    from securevfl.privacy import Accountant, PrivacyLedger, PrivacyReport, calibrate
    from securevfl.results import FitResult, ModelPart
    from securevfl.runtime import InProcessRuntime, Meter, Runtime


_EXPORTS = {  # public name -> its module: imported on first use (PEP 562), so a party
    # process that only aligns files or runs a protocol does not load every method and
    # accountant (importing them all took ~1.9 s, dp_accounting alone ~1.5 s)
    "Accountant": "securevfl.privacy",
    "ConfigError": "securevfl.errors",
    "DataError": "securevfl.errors",
    "FitResult": "securevfl.results",
    "InProcessRuntime": "securevfl.runtime",
    "Meter": "securevfl.runtime",
    "Method": "securevfl.methods.base",
    "Model": "securevfl.model.predict",
    "ModelPart": "securevfl.results",
    "Option": "securevfl.context",
    "PartyTimeoutError": "securevfl.errors",
    "Prediction": "securevfl.model.predict",
    "PrivacyLedger": "securevfl.privacy",
    "PrivacyReport": "securevfl.privacy",
    "ProtocolError": "securevfl.errors",
    "RunContext": "securevfl.context",
    "RunSpec": "securevfl.context",
    "Runtime": "securevfl.runtime",
    "SecureVFLError": "securevfl.errors",
    "UnknownNameError": "securevfl.errors",
    "calibrate": "securevfl.privacy",
    "list_datasets": "securevfl.data",
    "load_dataset": "securevfl.data",
    "load_model": "securevfl.model.predict",
    "partition_columns": "securevfl.data",
    "register_method": "securevfl.methods.base",
    "run_experiment": "securevfl.experiment",
    "run_in_processes": "securevfl.experiment",
    "train_test_split": "securevfl.data",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "Accountant",
    "ConfigError",
    "DataError",
    "FitResult",
    "InProcessRuntime",
    "Meter",
    "Method",
    "Model",
    "ModelPart",
    "Option",
    "PartyTimeoutError",
    "Prediction",
    "PrivacyLedger",
    "PrivacyReport",
    "ProtocolError",
    "RunContext",
    "RunSpec",
    "Runtime",
    "SecureVFLError",
    "UnknownNameError",
    "__version__",
    "calibrate",
    "list_datasets",
    "load_model",
    "load_dataset",
    "partition_columns",
    "register_method",
    "run_experiment",
    "run_in_processes",
    "train_test_split",
]
