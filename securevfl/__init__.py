"""securevfl: privacy-preserving vertical federated learning, DP, MPC and HE side by side.

Typical use::

    import baselines, securevfl
    baselines.load_all()                      # register the plain/HE baselines too
    record = securevfl.run_experiment(securevfl.RunSpec(method="vfl", dataset="breast"))
"""

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
from securevfl.predict import Model, Prediction, load_model
from securevfl.privacy import Accountant, PrivacyLedger, PrivacyReport, calibrate
from securevfl.results import FitResult, ModelPart
from securevfl.runtime import InProcessRuntime, Meter, Runtime
from securevfl.version import __version__

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
