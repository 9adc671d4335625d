"""``npy.read_array``, the one-read path the offline check uses, gives what ``np.load`` gives for every dtype and
layout, refuses a file larger than asked without reading its data, and names the file and the fault of a bad one."""
from __future__ import annotations

import numpy as np
import pytest

from dump_fixtures import write_npy
from msdebug_hooks.dump import npy
from msdebug_hooks.errors import DumpError

DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16, np.float32, np.float64, ">f4"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, order", [((), "C"), ((0, 3), "C"), ((7,), "C"), ((3, 4, 5), "C"), ((6, 5), "F")])
def test_same_array_as_np_load(tmp_path, dtype, shape, order):
    rng = np.random.default_rng(3)
    value = np.asarray(rng.standard_normal(shape) * 50, order=order).astype(dtype, order=order)
    path = write_npy(tmp_path / "t.npy", value)
    header, data = npy.read_array(path)
    expected = np.load(path)
    assert data.dtype == expected.dtype and data.shape == expected.shape
    assert data.flags.f_contiguous == expected.flags.f_contiguous and not data.flags.writeable
    np.testing.assert_array_equal(data, expected)
    assert header == npy.read_header(path)


def _raw_npy(path, text: str, data: bytes):
    """A version-1.0 ``.npy`` with exactly the header text given (numpy itself pads to 64 bytes; others may not)."""
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + data)
    return path


def test_long_header_and_unaligned_data(tmp_path):
    values = np.array([1.5, -2.0, 3.25])
    text = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"
    long = _raw_npy(tmp_path / "long.npy", text + " " * 6000 + "\n", values.tobytes())   # past the first 4 KB
    odd = _raw_npy(tmp_path / "odd.npy", text + "\n", values.tobytes())                  # data at byte 69
    for path in (long, odd):
        header, data = npy.read_array(path)
        assert data.tolist() == values.tolist() == np.load(path).tolist()
        assert header == npy.read_header(path)
    assert npy.read_header(odd).data_offset % 8


def test_larger_than_asked_reads_the_header_only(tmp_path):
    path = write_npy(tmp_path / "big.npy", np.zeros(100_000, np.float32))
    header, data = npy.read_array(path, max_bytes=1000)
    assert data is None and header == npy.read_header(path) and header.nbytes == 400_000
    header, data = npy.read_array(path, max_bytes=400_000)          # exactly the data: taken
    assert data is not None and data.shape == (100_000,)


def test_bad_files_name_the_file_and_the_fault(tmp_path):
    good = write_npy(tmp_path / "a.npy", np.arange(100_000, dtype=np.float32))
    cut = tmp_path / "cut.npy"
    cut.write_bytes(good.read_bytes()[:20_000])
    for max_bytes in (None, 100):          # read whole, and the header-only path
        with pytest.raises(DumpError) as info:
            npy.read_array(cut, max_bytes=max_bytes)
        assert "cut.npy" in str(info.value) and "truncated" in str(info.value) and "400128" in str(info.value)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not numpy at all")
    with pytest.raises(DumpError, match="junk.npy.*numpy magic"):
        npy.read_array(junk)
    with pytest.raises(DumpError, match="missing.npy.*file not found"):
        npy.read_array(tmp_path / "missing.npy")
