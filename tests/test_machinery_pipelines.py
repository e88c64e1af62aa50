"""Shape-generic device pipelines, the parts that run on a CPU: which extents become run-time, the init kernel's
source and arguments (NVRTC compiles the source where it is installed), and the fall-back to nvmath's pipeline.

On a GPU, ``tests/test_machinery_pipelines_gpu.py`` checks that one build serves every shape and computes exactly.
"""

from __future__ import annotations

import re
import warnings

import pytest

from utilities.machinery import pipelines, versions
from utilities.machinery.pipelines import RUNTIME

# the Ozaki-I slice views: A as (m, k, S) with k contiguous, B as (k, n, S) with k contiguous
OZAKI_A = ((2048, 2048, 8), (2048, 1, 2048 * 2048))
OZAKI_B = ((2048, 4096, 8), (1, 2048, 2048 * 4096))


def test_every_extent_and_every_non_unit_stride_is_marked_run_time():
    a = pipelines.extents(*OZAKI_A)
    assert a.marked_shape == (RUNTIME,) * 3 and a.marked_strides == (RUNTIME, 1, RUNTIME)
    assert a.counts == (2, 3)
    assert a.runtime_values() == ([2048, 2048 * 2048], [2048, 2048, 8])
    b = pipelines.extents(*OZAKI_B)
    assert b.marked_strides == (1, RUNTIME, RUNTIME) and b.runtime_values() == ([2048, 2048 * 4096], [2048, 4096, 8])


def test_two_shapes_of_one_kernel_mark_the_same_way():
    """What nvmath sees (and types, and keys its code by) is the same for every shape: that is the point."""
    small, large = pipelines.extents((256, 384, 8), (384, 1, 256 * 384)), pipelines.extents(*OZAKI_A)
    assert (small.marked_shape, small.marked_strides) == (large.marked_shape, large.marked_strides)
    assert small.shape != large.shape


@pytest.mark.parametrize(
    ("shape", "strides", "message"),
    [((64, 64), (64,), "differ in rank"), ((64, 64), (128, 2), "unit stride")],
)
def test_operands_the_pipeline_cannot_take_are_refused_with_the_reason(shape, strides, message):
    with pytest.raises(ValueError, match=message):
        pipelines.extents(shape, strides)


def test_a_batch_of_one_is_marked_as_a_batch_of_many_whatever_its_exporter_says_of_its_stride():
    """A0 (1, M, K0) seen as (M, K0, 1): NumPy's DLPack gives no strides (contiguous once extents of one are ignored),
    whence (K0, 1, 1); an exporter keeping the array's own gives (K0, 1, M K0). Both mark and run as a batch of 3."""
    m, k0 = 2560, 64
    numpy_said = pipelines.extents((m, k0, 1), pipelines.contiguous_strides((m, k0, 1)))
    own = pipelines.extents((m, k0, 1), (k0, 1, m * k0))
    many = pipelines.extents((m, k0, 3), (k0, 1, m * k0))
    assert numpy_said == own and own.strides == (k0, 1, m * k0)
    assert own.marked_strides == many.marked_strides == (RUNTIME, 1, RUNTIME) and own.counts == many.counts
    assert own.runtime_values() == ([k0, m * k0], [m, k0, 1])
    assert pipelines.settled_strides((4, 1, 5), (5, 7, 1)) == (5, 20, 1)  # the span of the others, in any place
    assert pipelines.settled_strides((1, 1), (3, 1)) == (1, 1)  # nothing longer than one: unit strides


def test_contiguous_strides():
    assert pipelines.contiguous_strides((3, 4, 5)) == (20, 5, 1)


def test_tensor_struct_follows_libmathdx_layout_pointer_extents_strides():
    name, source = pipelines.tensor_struct(strides=2, shape=3)
    assert name == "libmathdx_tensor_2s_3s"
    assert re.search(r"void\* ptr;\s*long long shape\[3\];\s*long long strides\[2\];", source)
    assert "strides" not in pipelines.tensor_struct(strides=0, shape=2)[1]


def test_init_kernel_arguments_follow_the_source_parameters():
    a, b = pipelines.extents(*OZAKI_A), pipelines.extents((256, 128), (1, 256))
    source = pipelines.init_kernel_source("create_fn", a.counts, b.counts)
    params = re.search(r"create_shape_generic_pipeline\((.*)\)", source).group(1).split(", ")
    args = pipelines.init_kernel_arguments(a, b, 0xA000, 0xB000)
    assert len(params) == 1 + len(args)  # the storage comes first
    assert params[1] == "void* a_ptr" and args[0] == 0xA000
    assert params[1 + 1 + 2 + 3] == "void* b_ptr" and args[1 + 2 + 3] == 0xB000
    assert [int(x) for x in args[1:6]] == [2048, 2048 * 2048, 2048, 2048, 8]
    assert [int(x) for x in args[7:]] == [256, 256, 128]
    assert "libmathdx_tensor_1s_2s b;" in source and "create_fn(libmathdx_pipeline{storage}, a, b);" in source


def test_init_kernel_source_compiles():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed here")
    source = pipelines.init_kernel_source("create_fn", (2, 3), (1, 2)).encode()
    err, prog = nvrtc.nvrtcCreateProgram(source, b"init.cu", 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        pytest.skip(f"NVRTC is not usable here: {err}")
    options = [b"-arch=compute_90", b"-rdc=true", b"-dlto"]
    (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode()


class _FakeMatmul:
    def __init__(self):
        self.calls = []

    def suggest_device_pipeline(self, depth, a, b):
        self.calls.append((depth, a, b))
        return "nvmath's pipeline"


def test_switch_off_gives_nvmath_pipeline_silently(monkeypatch):
    monkeypatch.setenv(pipelines.SWITCH, "off")
    mm = _FakeMatmul()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pipelines.device_pipeline(mm, 3, "a", "b") == "nvmath's pipeline"
    assert mm.calls == [(3, "a", "b")]


def test_another_stack_falls_back_to_nvmath_pipeline_and_says_so(monkeypatch):
    monkeypatch.delenv(pipelines.SWITCH, raising=False)
    monkeypatch.setattr(pipelines, "supported", lambda: False)
    monkeypatch.setattr(versions, "_warned", set())
    mm = _FakeMatmul()
    with pytest.warns(UserWarning, match="shape-generic device pipelines .* each problem shape builds its kernel"):
        assert pipelines.device_pipeline(mm, 2, "a", "b") == "nvmath's pipeline"


def test_the_guard_band_reports_how_far_a_write_went():
    band = bytearray([pipelines.GUARD_BYTE] * 64)
    assert pipelines.guard_overwritten(bytes(band)) == 0
    band[0] = 0
    assert pipelines.guard_overwritten(bytes(band)) == 1
    band[40] = 7
    assert pipelines.guard_overwritten(bytes(band)) == 41
