"""The options every run has (RunSpec's fields) and the one place a RunSpec is built.

The CLI, bench suites and party processes all hand :func:`build_spec` flat ``name -> value``
pairs; it routes each to a RunSpec field, a dataset option or a method option, and parses and
checks it by its :class:`~securevfl.options.Option`. :func:`check_common` re-checks a spec built
any other way (the Python API) before a run starts.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.options import Option, dash, parse_bool
from securevfl.registry import lookup

_DEFAULTS = {f.name: (f.default if f.default is not MISSING else None) for f in fields(RunSpec)}
DATASET_KEYS = ("n", "d", "sparsity", "encoding", "label_column", "categories", "feature_column")
_NESTED = ("options", "dataset_options")


def _common(name: str, type_: Any, help_: str, **rule: Any) -> Option:
    return Option(type_, _DEFAULTS.get(name), help_, **rule)


COMMON_OPTIONS: dict[str, Option] = {
    "dataset": _common(
        "dataset",
        str,
        "dataset name (see `securevfl datasets`), or csv:P0.csv,P1.csv,... with one CSV per "
        "party (header row; party 0's has the label column, see --label-column; blank cells "
        "are imputed with a constant plus a missingness indicator column), or parquet:A,B,... "
        "with one Parquet source per party (a file, a folder of shards or a glob; same rules)",
    ),
    "data": _common(
        "data",
        str,
        "this party's own CSV file or Parquet source (a folder, a glob or a .parquet file; "
        "the label holder's holds the label column, see "
        "--label-column): with `securevfl party` each party names only its own file and its own "
        "--categories/--bounds; implies --dataset csv. Rows are aligned by PSI on --id-column",
    ),
    "id_column": _common(
        "id_column",
        str,
        "with --dataset csv:...: each file's ID column; the parties' rows are aligned by "
        "private set intersection first",
    ),
    "label_column": Option(
        str,
        None,
        "with --dataset csv:...: party 0's label column; default label",
    ),
    "categories": Option(
        str,
        None,
        'with --dataset csv:...: JSON file {"column": ["a", "b", ...]} of each text column\'s '
        "categories, public metadata (one-hot encoded per party); a text column without them is "
        "refused, as categories read off the data are data-derived",
    ),
    "feature_column": Option(
        str,
        None,
        "with --dataset csv:... or --data: a first column that looks like an ID (distinct "
        "integers: monotone, dense, or under an ID-like name) but is a feature: kept as one",
    ),
    "bounds": _common(
        "bounds",
        str,
        "with --dataset csv:...: a CSV file 'column,lo,hi' declaring each column's public "
        "domain (values clipped in), the better way: it spends no budget. Without it, a run "
        "with --epsilon releases each party's ranges under the budget (--bounds-share); a run "
        "without one scales each column by its own exact min/max",
    ),
    "bounds_share": _common(
        "bounds_share",
        float,
        "with --dataset csv:... and --epsilon but no --bounds: the share of the budget spent on "
        "each party's DP scaling ranges (one noisy histogram of its columns on a public log "
        "grid; a share of the Gaussian-DP mu^2, of epsilon in a pure-DP run), composed into "
        "the record's epsilon; default 0.1",
        gt=0,
        le=0.9,
    ),
    "parties": _common(
        "parties",
        int,
        "data parties K (party 0 holds the labels); >= 2 when federated",
        ge=1,
        le=1000,
    ),
    "partition": _common(
        "partition",
        str,
        "how columns are split across parties (one-hot groups stay together); roles: the "
        "dataset's declared holders (adult, K = 2: demographics and household at the label "
        "holder, education, work and finances at the partner)",
        choices=("contiguous", "random", "roles"),
    ),
    "n": Option(int, None, "rows, for synthetic datasets", ge=1, le=100_000_000),
    "d": Option(int, None, "columns, for synthetic datasets", ge=1, le=100_000),
    "sparsity": Option(float, None, "share of nonzeros, for synthetic-sparse", gt=0, le=1),
    "encoding": Option(str, None, "categorical encoding (adult)", choices=("onehot", "compact")),
    "center": _common(
        "center",
        parse_bool,
        "centre numeric columns on their training mean, each party on its own columns",
    ),
    "model": _common(
        "model",
        str,
        "glm: vertical GLM; mlp: split neural network; cnn: split neural network whose bottoms "
        "are a small CNN (two 3x3 convolutions, --hidden/4 and --hidden/2 channels) on each "
        "party's pixels in their image rows, for image datasets (digits, fashion-mnist, "
        "mnist5k) and split-NN methods; gbdt: gradient-boosted trees (secureboost; for the local "
        "and centralized references scikit-learn's HistGradientBoosting); best: local only, the "
        "label holder's best of glm, mlp and gbdt chosen on a validation fifth of its training "
        "rows; default: the method's first model",
        choices=("glm", "mlp", "cnn", "gbdt", "best"),
    ),
    "epochs": _common("epochs", int, "passes over the training split", ge=1, le=100_000),
    "batch_size": _common("batch_size", int, "minibatch size", ge=1, le=10_000_000),
    "lr": _common(
        "lr",
        float,
        "learning rate; default: GLM 1/beta_theta of the loss (logistic 4.0, least squares "
        "1.0), MLP 0.01 (Adam)",
        gt=0,
        le=100,
    ),
    "loss": _common("loss", str, "GLM loss"),
    "penalty": _common("penalty", str, "GLM penalty"),
    "lam": _common("lam", float, "penalty strength", ge=0, le=1e6),
    "embedding_dim": _common(
        "embedding_dim", int, "split-NN embedding size per party", ge=1, le=4096
    ),
    "hidden": _common(
        "hidden",
        int,
        "split-NN hidden width (cnn: bottom channels hidden/4, hidden/2)",
        ge=1,
        le=65536,
    ),
    "aggregation": _common(
        "aggregation",
        str,
        "how the label holder combines embeddings (split-NN)",
        choices=("sum", "concat"),
    ),
    "seed": _common(
        "seed",
        int,
        "seed for the split, batches and initialisation (never DP noise: that comes from the "
        "CSPRNG unless --reproducible-noise); default: OS entropy",
        ge=0,
        lt=2**63,
    ),
    "reproducible_noise": _common(
        "reproducible_noise",
        parse_bool,
        "reproduction mode: draw DP noise from --seed too, so a run can be repeated bit for bit; "
        "anyone holding the record can then regenerate the noise, so it prints no ε "
        "(not a guarantee)",
    ),
    "epsilon": _common(
        "epsilon", float, "privacy budget ε (methods that take one)", ge=1e-6, le=1e6
    ),
    "delta": _common("delta", float, "δ of (ε, δ)-DP", gt=0, lt=1),
    "timeout": _common("timeout", float, "seconds a party waits for a peer", gt=0, le=7 * 86400),
    "engine": _common(
        "engine",
        str,
        "where each party computes on its own rows: numpy (in its process) or dask (Dask "
        "reductions over row blocks on the party's own cluster; hdp-vfl, fm-vfl and he-vfl, "
        "and secureboost's Paillier work as tasks; other methods say so and run in one "
        "process; hdp-vfl, fm-vfl and he-vfl on a Parquet source keep the table on the "
        "cluster, read block by block; fm-vfl's secure product streams it with --processes, "
        "he-vfl takes each minibatch's rows from it); the "
        "protocol between parties is the same",
        choices=("numpy", "dask"),
    ),
    "dask_scheduler": _common(
        "dask_scheduler",
        str,
        "with --engine dask: this party's Dask scheduler ADDRESS (tcp://host:port); default: "
        "a LocalCluster of up to 2 worker processes started by the party (no more, over "
        "the parties of one process, than its cores; secureboost's key holder, whose "
        "randomness runs in the background at a lower priority, gets up to 2 regardless)",
    ),
}


def build_spec(params: dict[str, Any]) -> RunSpec:
    """A RunSpec from flat values; each is parsed and checked by its option (ConfigError).

    Keys: RunSpec fields, dataset options (``n``, ``d``, ...), else the method's own options.
    The nested ``options``/``dataset_options`` of a ``RunSpec.__dict__`` are flattened first.
    """
    flat = {k: v for k, v in params.items() if k not in _NESTED}
    for key in _NESTED:
        flat.update(params.get(key) or {})
    if not isinstance(flat.get("method"), str):
        raise ConfigError(f"a run must name a method, got {flat.get('method')!r}")
    method = lookup("method", flat.pop("method"))
    if flat.get("data") is not None and flat.get("dataset") is None:
        flat["dataset"] = "csv"  # each party's own file
    for key, value in method.common_defaults(flat).items():  # the method's own, if not given
        flat.setdefault(key, value)
    kw: dict[str, Any] = {"method": method.name, "dataset_options": {}, "options": {}}
    for key, value in flat.items():
        if key in DATASET_KEYS:
            kw["dataset_options"][key] = COMMON_OPTIONS[key].check(key, value)
        elif key == "partition" and isinstance(value, list):
            kw[key] = value  # explicit column lists (a csv run's files)
        elif key in COMMON_OPTIONS:
            kw[key] = None if value is None else COMMON_OPTIONS[key].check(key, value)
        elif key in _DEFAULTS:  # fields set by the code, not by users (csv partitions)
            kw[key] = value
        elif key in method.options:
            kw["options"][key] = method.options[key].check(key, value, owner=method.name)
        else:
            raise ConfigError(not_an_option(key, method))
    if kw.get("model") is None:
        kw["model"] = method.models[0]
    return RunSpec(**kw)


def not_an_option(key: str, method: Any) -> str:
    """The one-line error for an option the method does not have."""
    own = ", ".join(f"--{dash(o)}" for o in sorted(method.options)) or "none"
    return f"option --{dash(key)} does not apply to method {method.name!r} (its options: {own})"


def check_common(spec: RunSpec, *, min_parties: int) -> None:
    """Check every generic field of ``spec`` by its option (raises ConfigError)."""
    for name, opt in COMMON_OPTIONS.items():
        if name in DATASET_KEYS:
            value = spec.dataset_options.get(name)
        else:
            value = getattr(spec, name)
        if value is None or (name == "partition" and isinstance(value, list)):
            continue  # unset, or a csv run's column lists (set by the code)
        opt.check(name, value)
    if spec.reproducible_noise and spec.seed is None:
        raise ConfigError("reproducible_noise needs --seed (the noise is drawn from it), got none")
    if spec.parties < min_parties:
        raise ConfigError(f"parties must be >= {min_parties}, got {spec.parties}")
