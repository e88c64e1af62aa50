"""The checker core (``utilities.checker``): what an error in the attendee's code is said to mean, and values printed
plainly and compared exactly at infinities. A track's checker (Ozaki-I's first) carries the error to the attendee."""

from __future__ import annotations

import numpy as np
import pytest

from utilities import checker
from utilities.checker import CheckFailure
from utilities.ozaki import check


class CudaAPIError(Exception):
    """Stands in for numba-cuda's driver error (same name, same message form)."""


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("[700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS", "index past its end"),
        ("cudaErrorLaunchOutOfResources: too many resources requested for launch", "registers per thread"),
        ("[716] Call to cuCtxSynchronize results in CUDA_ERROR_MISALIGNED_ADDRESS", "16-byte copy"),
        ("[1] Call to cuLaunchKernel results in CUDA_ERROR_INVALID_VALUE", "1024 threads"),
    ],
)
def test_a_cuda_error_in_the_attendees_kernel_says_what_causes_it(message, cause):
    assert cause in checker.explain_error(CudaAPIError(message))

    def kernel_run(a, e, slices):
        raise CudaAPIError(message)

    with pytest.raises(CheckFailure) as info:
        check.check_slice_number(kernel_run)
    assert info.value.stage == "running your code" and cause in str(info.value)


def test_sticky_errors_say_to_restart_and_python_errors_name_their_cause():
    assert "restart" in checker.explain_error(CudaAPIError("CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert "restart" not in checker.explain_error(CudaAPIError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"))
    assert "math.ldexp" in checker.explain_error(OverflowError("math range error"))
    assert "hard-coded count" in checker.explain_error(IndexError("index 6 is out of bounds"))
    typing = type("TypingError", (Exception,), {})
    assert "numba could not compile" in checker.explain_error(typing("bad"))


def test_values_print_plain_and_infinities_compare_exactly():
    with pytest.raises(CheckFailure) as info:
        checker.compare("x", np.array([2, 3], np.int64), np.array([2, 4], np.int64))
    assert "got 3, expected 4" in str(info.value)
    with pytest.raises(CheckFailure) as info:
        checker.compare("y", np.array([0.348], np.float16), np.array([0.5], np.float16), bound=0.01)
    assert "got 0.348, expected 0.5" in str(info.value)
    checker.compare("z", np.array([np.inf, -np.inf, np.nan]), np.array([np.inf, -np.inf, np.nan]), bound=0.0)
    for got in ([1e308, -np.inf, np.nan], [np.inf, np.inf, np.nan], [np.inf, -np.inf, 0.0]):
        with pytest.raises(CheckFailure):  # a bound, even an infinite one, never excuses a non-finite entry
            checker.compare("z", np.array(got), np.array([np.inf, -np.inf, np.nan]), bound=np.inf)
    assert checker.plain((np.int64(2), np.float64(0.5))) == "(2, 0.5)"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (OverflowError("Python integer 200 out of bounds for int8"), "does not fit its type"),
        (OverflowError("Python int too large to convert to C long"), "does not fit its type"),
        (OverflowError("int too big to convert"), "does not fit its type"),
        (OverflowError("math range error"), "beyond DBL_MAX"),
        (OverflowError((34, "Numerical result out of range")), "beyond DBL_MAX"),
        (OverflowError("cannot convert float infinity to integer"), "beyond DBL_MAX"),
        (OverflowError("something else"), "does not fit its type: the traceback"),
    ],
)
def test_an_overflow_is_told_by_its_kind_integer_or_float(error, cause):
    hint = checker.explain_error(error)
    assert cause in hint
    if "DBL_MAX" not in cause:
        assert "DBL_MAX" not in hint and "ldexp" not in hint, "an integer overflow gets no hint about doubles"


def test_an_integer_overflow_in_the_attendees_code_is_not_sent_to_ldexp():
    def digits_in_int8(x, e, slices):  # NumPy 2 refuses np.int8(200): an OverflowError about an integer
        return [int(np.int8(200))] * slices

    with pytest.raises(CheckFailure) as info:
        check.check_slice_number(digits_in_int8)
    assert info.value.stage == "running your code" and "does not fit its type" in str(info.value)
    assert "ldexp" not in str(info.value)
