"""NumPy dtypes <-> the protocol's ``DataType`` numbers (MindInsight's enum; MindSpore's DbgDataType agrees)."""
from __future__ import annotations

import numpy as np

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

_NUMPY_TO_DT = {
    np.dtype(np.bool_): graph_pb.DT_BOOL,
    np.dtype(np.int8): graph_pb.DT_INT8, np.dtype(np.int16): graph_pb.DT_INT16,
    np.dtype(np.int32): graph_pb.DT_INT32, np.dtype(np.int64): graph_pb.DT_INT64,
    np.dtype(np.uint8): graph_pb.DT_UINT8, np.dtype(np.uint16): graph_pb.DT_UINT16,
    np.dtype(np.uint32): graph_pb.DT_UINT32, np.dtype(np.uint64): graph_pb.DT_UINT64,
    np.dtype(np.float16): graph_pb.DT_FLOAT16, np.dtype(np.float32): graph_pb.DT_FLOAT32,
    np.dtype(np.float64): graph_pb.DT_FLOAT64,
}
_DT_TO_NUMPY = {dt: np_dtype for np_dtype, dt in _NUMPY_TO_DT.items()}


def data_type(dtype) -> int:
    """The DataType number of a NumPy dtype; 0 (DT_UNDEFINED) for dtypes the protocol cannot carry."""
    try:
        return _NUMPY_TO_DT.get(np.dtype(dtype), graph_pb.DT_UNDEFINED)
    except TypeError:
        return graph_pb.DT_UNDEFINED


def numpy_dtype(dt: int) -> np.dtype:
    """The NumPy dtype of a DataType number; KeyError for non-tensor types."""
    return _DT_TO_NUMPY[dt]


def wire_array(value: np.ndarray) -> np.ndarray:
    """``value`` as the server can store it: a supported dtype (others, e.g. bfloat16, become float32),
    little-endian, C-contiguous."""
    array = np.asarray(value)
    if data_type(array.dtype) == graph_pb.DT_UNDEFINED:
        array = array.astype(np.float32)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array if array.flags.c_contiguous else np.array(array, order="C")   # keeps 0-d scalars 0-d
