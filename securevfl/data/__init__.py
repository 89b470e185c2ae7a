"""Datasets (catalogue, loaders, preprocessing) and vertical partitioning."""

from securevfl.data.datasets import (
    Dataset,
    DatasetInfo,
    check_image_dataset,
    check_rows,
    dataset_names,
    image_shape,
    list_datasets,
    load_dataset,
)
from securevfl.data.optional import read_idx
from securevfl.data.partition import (
    partition_columns,
    row_norm_bound,
    scale_block_to_unit_rows,
    schema_norm_bound,
)
from securevfl.data.preprocess import (
    BinaryColumn,
    CategoricalColumn,
    NumericColumn,
    encode_columns,
    scale_to_unit_interval,
)
from securevfl.data.split import split_in_place, take_rows, train_test_split

__all__ = [
    "BinaryColumn",
    "CategoricalColumn",
    "Dataset",
    "DatasetInfo",
    "NumericColumn",
    "check_image_dataset",
    "check_rows",
    "dataset_names",
    "encode_columns",
    "image_shape",
    "list_datasets",
    "load_dataset",
    "partition_columns",
    "read_idx",
    "row_norm_bound",
    "scale_block_to_unit_rows",
    "scale_to_unit_interval",
    "schema_norm_bound",
    "split_in_place",
    "take_rows",
    "train_test_split",
]
