"""preflight: every verdict on fake machines, and the real verdict on this one."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from utilities import preflight as pf
from utilities.preflight import Facts, Gpu, PreflightError, judge

H100 = Gpu("NVIDIA H100 80GB HBM3", (9, 0))
GOOD = Facts(
    gpus=(H100,),
    cuda_driver=13000,
    driver_release="580.159.04",
    runtimes={"cuda-bindings": "13.0"},
    versions=dict(pf.PINS),
    libmathdx_path="/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libmathdx.so.0",
)
NO_GPU = dataclasses.replace(GOOD, gpus=(), gpu_problem="no CUDA driver: libcuda.so.1 not found", cuda_driver=None)
HAS_GPU = bool(pf.probe_gpus()[0])


def fails(facts: Facts, *words: str, **requirements: bool) -> str:
    """The PreflightError message for these facts, checked to contain every word."""
    with pytest.raises(PreflightError) as caught:
        judge(facts, **requirements)
    message = str(caught.value)
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"
    return message


def test_verified_machine_passes_with_every_track_and_no_warning() -> None:
    environment = judge(GOOD)
    assert environment.gpu == H100
    assert set(environment.tracks.values()) == {"yes"}
    assert environment.warnings == ()
    table = environment.table()
    for text in (
        "NVIDIA H100 80GB HBM3",
        "9.0",
        "580.159.04, CUDA 13.0",
        "0.30.4",
        "14.2.0",
        "0.3.2.6",
        "libmathdx.so.0",
    ):
        assert text in table


def test_no_gpu_names_the_fix_and_what_still_runs() -> None:
    message = fails(NO_GPU, "No NVIDIA GPU", "libcuda.so.1", "Fix:", "sm_80", ">= 580", "3a_ozaki_numerics", "NumPy")
    assert message.count("\n- ") == 1  # only the GPU is wrong


def test_no_gpu_is_fine_when_not_required_and_tracks_say_why() -> None:
    environment = judge(NO_GPU, require_gpu=False)
    assert environment.gpu is None
    assert environment.tracks["CPU notebooks 3a, 4a"] == "yes"
    assert environment.tracks["track 4 (Ozaki-II)"] == "no: no NVIDIA GPU"
    assert environment.tracks["track 3 (Ozaki-I)"] == "no: no NVIDIA GPU"
    assert "none (no CUDA driver: libcuda.so.1 not found)" in environment.table()


@pytest.mark.parametrize(("cc", "words"), [((7, 5), ("7.5", "8.0 or newer")), ((6, 1), ("6.1", "8.0 or newer"))])
def test_compute_capability_too_old(cc: tuple[int, int], words: tuple[str, ...]) -> None:
    facts = dataclasses.replace(GOOD, gpus=(Gpu("Tesla T4", cc),))
    fails(facts, "Tesla T4", *words, "Fix:", "sm_80, sm_86, sm_89, sm_90, sm_100, sm_103, sm_120")
    assert judge(facts, require_gpu=False).tracks["track 1 (multi-pass)"] == f"no: compute capability {cc[0]}.{cc[1]}"


def test_compute_capability_above_nvmath() -> None:
    facts = dataclasses.replace(GOOD, gpus=(Gpu("Future GPU", (13, 0)),))
    fails(facts, "13.0", "nvmath-python 1.0.0", "up to 12.1", "sm_120", "Fix:")


def test_compute_capability_inside_range_but_unverified_warns() -> None:
    environment = judge(dataclasses.replace(GOOD, gpus=(Gpu("Jetson AGX Orin", (8, 7)),)))
    assert environment.warnings == ("compute capability 8.7 is not one the course was verified on",)


@pytest.mark.parametrize("require_gpu", [True, False])
def test_numpy_2_5_is_an_error_with_the_pin_to_install(require_gpu: bool) -> None:
    facts = dataclasses.replace(GOOD, versions=GOOD.versions | {"numpy": "2.5.0"})
    fails(facts, "numpy 2.5.0", "numba-cuda 0.30.4", 'pip install "numpy<2.5"', require_gpu=require_gpu)


def test_numba_cuda_missing() -> None:
    facts = dataclasses.replace(GOOD, versions=GOOD.versions | {"numba-cuda": None})
    fails(facts, "numba-cuda is not installed", 'pip install "numba-cuda==0.30.4"')
    assert "numba-cuda missing" in judge(facts, require_gpu=False).tracks["track 2 (block fusion)"]


def test_libmathdx_missing() -> None:
    facts = dataclasses.replace(GOOD, libmathdx_path=None)
    fails(facts, "libmathdx.so.0 cannot be found", "pip install", "nvidia-libmathdx-cu13==0.3.2.6")
    assert judge(facts, require_mathdx=False).tracks["track 3 (Ozaki-I)"] == "no: libmathdx.so.0 not found"
    judge(facts, require_gpu=False)  # libmathdx serves the GPU only


def test_libmathdx_only_on_pythonpath() -> None:
    elsewhere = "/tmp/site/nvidia/cu13/lib/libmathdx.so.0"
    facts = dataclasses.replace(GOOD, libmathdx_path=None, libmathdx_elsewhere=elsewhere)
    fails(facts, elsewhere, "PYTHONPATH", "site-packages", "nvidia-libmathdx-cu13==0.3.2.6", sys.executable)


def test_every_problem_is_listed_at_once() -> None:
    facts = dataclasses.replace(NO_GPU, versions=GOOD.versions | {"numpy": "2.5.1", "numba-cuda": None})
    message = fails(dataclasses.replace(facts, libmathdx_path=None), "numpy 2.5.1", "numba-cuda", "No NVIDIA GPU")
    assert message.count("\n- ") == 4


def test_versions_off_the_pins_warn_but_pass() -> None:
    facts = dataclasses.replace(GOOD, versions=GOOD.versions | {"numpy": "2.4.0", "cupy-cuda13x": "14.3.0"})
    environment = judge(facts)
    assert environment.warnings == (
        "numpy 2.4.0 differs from the verified 2.3.5",
        "cupy-cuda13x 14.3.0 differs from the verified 14.2.0",
    )
    assert "warning: numpy 2.4.0 differs" in environment.table()


def test_runtime_newer_than_driver_warns_where_no_gpu_is_required() -> None:
    newer_minor = dataclasses.replace(GOOD, runtimes={"cuda-bindings": "13.3", "nvrtc": "13.5"})
    assert judge(newer_minor).warnings == ()  # CUDA minor version compatibility, as on the verified H100
    facts = dataclasses.replace(GOOD, cuda_driver=12080, runtimes={"cuda-bindings": "13.3", "nvrtc": "12.8"})
    assert judge(facts, require_gpu=False).warnings == (
        "the CUDA of cuda-bindings 13.3 is newer than this driver's CUDA 12.8: install a driver for CUDA 13 (>= 580)",
    )


def test_a_driver_older_than_cuda_13_stops_a_gpu_notebook_with_the_fix() -> None:
    facts = dataclasses.replace(GOOD, cuda_driver=12080, driver_release="550.54.15")
    message = fails(facts, "driver 550.54.15 supports CUDA 12.8", "built for CUDA 13.0", "Fix:", "580 or newer")
    assert message.count("\n- ") == 1
    assert judge(facts, require_gpu=False).tracks["track 2 (block fusion)"] == "no: driver for CUDA 12.8"
    assert judge(dataclasses.replace(GOOD, cuda_driver=13020)).tracks["track 2 (block fusion)"] == "yes"


@pytest.mark.parametrize(
    ("missing", "words"),
    [
        (("cupy-cuda13x",), ("CuPy is not installed", 'pip install "cupy-cuda13x==14.2.0"', "./course lab")),
        (("nvmath-python",), ("nvmath-python is not installed", "cuBLASDx", 'pip install "nvmath-python==1.0.0"')),
        (("numba",), ("numba is not installed", 'pip install "numba==0.68.0"')),
    ],
    ids=["cupy", "nvmath-python", "numba"],
)
def test_every_gpu_package_the_table_shows_missing_stops_a_gpu_notebook_with_the_fix(missing, words) -> None:
    """Found by reading ``problems_for`` with a stand-in machine (issue 41): with a GPU and CuPy or nvmath-python
    missing, the preflight passed and the next cell failed on an import."""
    facts = dataclasses.replace(GOOD, versions=GOOD.versions | dict.fromkeys(missing))
    message = fails(facts, *words)
    assert message.count("\n- ") == 1  # that package alone
    assert pf.stopped_message(pf.problems_for(facts)).startswith(
        f"Not run: this cell needs what the preflight found missing ({words[0]}"
    )
    assert judge(facts, require_gpu=False).tracks["CPU notebooks 3a, 4a"] == "yes"  # the CPU notebooks need none


def test_any_cupy_distribution_serves() -> None:
    versions = GOOD.versions | {"cupy-cuda13x": None, "cupy": "14.2.0"}
    assert judge(dataclasses.replace(GOOD, versions=versions)).tracks["track 1 (multi-pass)"] == "yes"


def test_numpy_missing_stops_even_a_cpu_notebook() -> None:
    facts = dataclasses.replace(NO_GPU, versions=GOOD.versions | {"numpy": None})
    fails(facts, "numpy is not installed", 'pip install "numpy==2.3.5"', require_gpu=False)


def test_missing_packages_show_in_table_and_tracks() -> None:
    versions = dict.fromkeys(GOOD.versions) | {"numpy": "2.3.5"}
    environment = judge(dataclasses.replace(NO_GPU, versions=versions, libmathdx_path=None), require_gpu=False)
    assert "cupy missing" in environment.tracks["track 1 (multi-pass)"]
    assert "nvmath-python missing" in environment.tracks["track 1 (multi-pass)"]
    assert re.search(r"^nvmath-python +missing$", environment.table(), re.MULTILINE)


def test_cuda_version_codes() -> None:
    assert [pf.cuda_version(code) for code in (13000, 12080, 13050, None)] == ["13.0", "12.8", "13.5", "-"]


def test_nvmath_cc_range_parsed_from_source_text() -> None:
    source = "X = 1\nMIN_SUPPORTED_CC = ComputeCapability(7, 5)\nMAX_SUPPORTED_CC = ComputeCapability(12, 0)\n"
    assert pf.nvmath_cc_range(source) == ((7, 5), (12, 0))
    with pytest.raises(ValueError):
        pf.nvmath_cc_range("MIN_SUPPORTED_CC = ComputeCapability(7, 0)\n")


def test_installed_nvmath_matches_the_fallback() -> None:
    if importlib.util.find_spec("nvmath") is None:
        pytest.skip("nvmath-python is not installed here (the test extra leaves it out)")
    assert pf.probe_nvmath_cc() == pf.NVMATH_CC_FALLBACK


# --- this machine ------------------------------------------------------------------------------------------


def test_probe_never_imports_nvmath_device() -> None:
    code = "import sys; from utilities.preflight import probe; probe(); print('nvmath.device' in sys.modules)"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_this_machine_without_gpu(capsys) -> None:
    environment = pf.preflight(require_gpu=False)
    assert environment.gpu is None
    assert "GPU" in capsys.readouterr().out
    with pytest.raises(PreflightError, match="3a_ozaki_numerics"):
        pf.preflight(require_gpu=True)


@pytest.mark.gpu
def test_this_gpu_machine_passes(capsys) -> None:
    environment = pf.preflight()
    assert environment.gpu is not None and environment.gpu.cc >= (8, 0)
    assert set(environment.tracks.values()) == {"yes"}
    print(environment.table())


def test_a_failed_preflight_shows_one_message_in_a_notebook_and_still_fails_the_cell():
    import subprocess
    import sys

    failing = "from utilities.preflight import Facts, judge\njudge(Facts(gpu_problem='no driver'))"
    value = "from utilities.preflight import Environment, Facts\nEnvironment(Facts(), {}, ())"
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"result = shell.run_cell({failing!r})\n"
        "print('FAILED' if result.error_in_exec is not None else 'PASSED')\n"
        f"shell.run_cell({value!r})\n"
    )
    root = pf.Path(__file__).parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    out = done.stdout + done.stderr
    assert "This notebook cannot run on this machine" in out and "No NVIDIA GPU: no driver" in out
    assert "Traceback" not in out and "preflight.py" not in out, out
    assert "FAILED" in out  # nbval and Run All still stop at the cell
    assert "Environment(" not in out  # the cell's value shows nothing more (the table was printed)


def test_the_cuda_line_puts_versions_first_so_no_package_version_is_misread() -> None:
    """cupy reports the CUDA it was built with: printed as ``cupy 13.2`` it read as cupy's version, one line above
    ``cupy 14.2.0``."""
    facts = dataclasses.replace(GOOD, runtimes={"cuda-bindings": "13.0", "nvrtc": "13.0", "cupy": "13.2"})
    table = pf.format_table(facts, pf.track_status(facts))
    line = next(line for line in table.splitlines() if line.startswith("CUDA of packages"))
    assert (
        line.split("  ", 1)[1].strip()
        == "CUDA 13.0 (cuda-bindings runtime), CUDA 13.0 (NVRTC), CUDA 13.2 (cupy runtime)"
    )
    assert not re.search(r"cupy \d", line)
    assert re.search(r"^cupy +14\.2\.0$", table, re.MULTILINE)


def test_the_message_of_a_stopped_cell_names_what_is_missing() -> None:
    assert pf.stopped_message(pf.problems_for(NO_GPU)) == (
        "Not run: this cell needs an NVIDIA GPU, and the preflight found none (no CUDA driver: libcuda.so.1 not found)."
    )
    old_numpy = pf.problems_for(dataclasses.replace(GOOD, versions={**GOOD.versions, "numpy": "2.5.0"}))
    assert pf.stopped_message(old_numpy).startswith("Not run: this cell needs what the preflight found missing (numpy")
    assert not pf.stop_later_cells("outside IPython nothing is stopped")


def test_in_a_kernel_every_cell_after_a_failed_preflight_says_why_and_a_pass_lifts_it() -> None:
    """As an attendee without a GPU meets it: cells run by hand after the preflight's stop say they need a GPU
    (not ``NameError``); the preflight's own cell and a reveal cell still run; a preflight that passes lifts it."""
    from utilities import execution

    fake = (  # the kernel probes a fake machine: the same verdicts on a CPU machine and a GPU one
        "import dataclasses\nimport utilities.preflight as pf\n"
        "GOOD = pf.Facts(gpus=(pf.Gpu('NVIDIA H100 80GB HBM3', (9, 0)),), cuda_driver=13000, versions=dict(pf.PINS),"
        " libmathdx_path='/venv/nvidia/cu13/lib/libmathdx.so.0')\n"
        "NO_GPU = dataclasses.replace(GOOD, gpus=(), gpu_problem='no CUDA driver: libcuda.so.1 not found')\n"
        "pf.probe = lambda: {}\n"
    )
    with execution.Kernel() as kernel:
        run, _ = kernel.run(fake.format("NO_GPU") + "pf.preflight()")
        assert run.error.startswith("PreflightError"), run.error
        for source in ("import cupy as cp\nx = cp.ones(3)", "print(x)", "display(memory_picture(MM.size))"):
            run, cell = kernel.run(source)
            assert run.error.startswith("StoppedByPreflight: Not run: this cell needs an NVIDIA GPU"), run.error
            assert "NameError" not in run.error and cell.outputs[0]["traceback"] == [
                "Not run: this cell needs an NVIDIA GPU, and the preflight found none "
                "(no CUDA driver: libcuda.so.1 not found)."
            ]
        run, _ = kernel.run("pf.preflight()")  # the preflight runs again, and fails again
        assert run.error.startswith("PreflightError"), run.error
        run, _ = kernel.run('from utilities.notebooks import reveal\nreveal("0_primer", "5a154c68")')
        assert run.error == "", run.error  # a reveal cell needs no GPU
        run, _ = kernel.run(fake.format("GOOD") + "pf.preflight()")
        assert run.error == "", run.error
        run, cell = kernel.run("x = 1\nprint(x + 1)")
        assert run.error == "" and execution.stream_text(cell) == "2\n"


@pytest.mark.skipif(HAS_GPU, reason="on a GPU the preflight passes and the primer's cells run")
def test_without_a_gpu_every_primer_cell_after_the_preflight_says_it_needs_one() -> None:
    """notebooks/0_primer.ipynb run by hand top to bottom on this machine, on past every error: the preflight's cell
    fails, every later code cell but the reveal cells says it needs a GPU (before: NameError in cells 3 to 13)."""
    import nbformat

    from utilities import execution

    nb = nbformat.read(Path(pf.__file__).resolve().parent.parent / "notebooks" / "0_primer.ipynb", as_version=4)
    run = execution.execute(nb, stop_on_error=False)
    code = [cell for cell in run.notebook.cells if cell.cell_type == "code"]
    errors = [cell_run.error.split(":")[0] for cell_run in run.cells]
    assert errors[0] == "PreflightError"
    for cell, error in zip(code[1:], errors[1:], strict=True):
        if "reveal" in cell.metadata.get("tags", []):
            assert error == "", error
        else:
            assert error == "StoppedByPreflight", (cell.source[:60], error)
