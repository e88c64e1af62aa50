"""Do the course kernels a notebook builds have the keys of prebuild jobs? Checked on the CPU, without a GPU.

One fresh process builds what the notebook builds, in its order (:data:`NOTEBOOKS`: the attendee's kernels first,
each a copy of the course's factory defined in ``__main__`` as the notebook's cell defines it, then the course's
kernels through the plans and arguments its cells and helpers use); another builds the prebuild jobs that should
serve them, each alone. Kernels are typed only (``utilities.machinery.cpu_build``): a typed key is the key a link
looks up. A course kernel whose key no job gets is a job missing or a key that follows the process's history::

    python tools/notebook_keys.py 1 2a 2c        # those notebooks (default: every one this tool drives)

Prints one line a course kernel and exits 1 if one has no job's key. It needs the GPU stack as pinned and a C
compiler (``cpu_build.unavailable()``). Drives notebooks 1, 2a, 2b, 2c and 2d; the Ozaki notebooks (3b, 3c, 3d, 4b) are
not written yet.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARK = "notebook-keys: "


def main_copy(func: Callable[..., Any]) -> Callable[..., Any]:
    """The course's ``func`` defined again in ``__main__``, as a notebook's cell defines the attendee's."""
    module = sys.modules[func.__module__]
    namespace = dict(vars(module))
    namespace["__name__"] = "__main__"
    exec(compile(inspect.getsource(func), f"<cell: {func.__name__}>", "exec"), namespace)
    return namespace[func.__name__]


def notebook_1(build: Callable[[str, Callable[[], Any]], None]) -> None:
    import cupy as cp

    from utilities.multipass import check
    from utilities.multipass.benchmarks import COURSE_FS, random_operands
    from utilities.multipass.config import DTYPES, PassConfig, PipelineConfig
    from utilities.multipass.tensorcore import Kernels, PassGemm, PipelineGemm, make_multipass_kernel
    from utilities.tiles import OUT_DTYPE

    mine = Kernels(multipass=main_copy(make_multipass_kernel))
    for dtype in DTYPES:  # the check at its contract's block
        cfg = PassConfig(dtype, **check.CONFIGS[dtype])
        a, bt = random_operands(3 * cfg.tile_m, 2 * cfg.tile_n, 2 * cfg.phase_k, dtype)
        build(
            f"yours {dtype}",
            lambda a=a, bt=bt, cfg=cfg: PassGemm(a.shape[0], bt.shape[0], a.shape[1], cfg, kernels=mine)(a, bt),
        )
    size = 8192
    for dtype in DTYPES:  # yours_beside_ours (int8, F = 2), then multipass_records
        a, bt = random_operands(size, size, size, dtype)
        for f in COURSE_FS:
            cfg = PassConfig(dtype, 8, f, tile_m=128, tile_n=128)
            build(f"multipass {dtype} F={f}", lambda cfg=cfg, a=a, bt=bt: PassGemm(size, size, size, cfg)(a, bt))
        lib = PipelineConfig(tile_m=128, tile_n=128)
        out = cp.empty((size, size), dtype=OUT_DTYPE[dtype])
        build(f"pipeline {dtype}", lambda lib=lib, out=out, a=a, bt=bt, d=dtype: PipelineGemm(a, bt, d, lib)(out))


def notebook_2a(build: Callable[[str, Callable[[], Any]], None]) -> None:
    import cupy as cp

    from utilities.fusion import check
    from utilities.fusion.tensorcore import BlockConfig, GemmBiasRelu, Kernels, make_gemm_bias_relu_kernel

    def z(*shape: int) -> Any:
        return cp.zeros(shape, cp.float16)

    mine = Kernels(gemm_bias_relu=main_copy(make_gemm_bias_relu_kernel))
    m, n, k = 384, 256, 192
    for fields in check.GEMM_CONFIGS:
        plan = GemmBiasRelu(m, n, k, cfg=BlockConfig(**fields), kernels=mine)
        build(f"yours {fields}", lambda plan=plan: plan(z(m, k), z(k, n), z(n), out=z(m, n)))
    build("fused at 2^16 x 256 x 256", lambda: GemmBiasRelu(2**16, 256, 256)(z(2**16, 256), z(256, 256), z(256)))
    lever = BlockConfig(tile_m=64, tile_n=128, tile_k=64, threads=128)
    build("lever", lambda: GemmBiasRelu(256, 256, 256, cfg=lever)(z(256, 256), z(256, 256), z(256)))


def notebook_2c(build: Callable[[str, Callable[[], Any]], None]) -> None:
    import cupy as cp

    from utilities.conv import check, simt
    from utilities.conv.benchmarks import REPORT_SHAPES, TARGET
    from utilities.conv.layout import PipeConfig
    from utilities.conv.reference import ConvShape
    from utilities.conv.tensorcore import Conv3x3, ConvConfig, Kernels, make_conv_kernel
    from utilities.conv.tensorcore_persistent import PipelinedConv

    def ops(s: ConvShape) -> tuple[Any, Any, Any]:
        x = cp.zeros((s.batch, s.height, s.width, s.c_in), cp.float16)
        return x, cp.zeros((3, 3, s.c_in, s.c_out), cp.float16), cp.zeros(s.c_out, cp.float16)

    mine = Kernels(neighbor=main_copy(simt.neighbor), conv=main_copy(make_conv_kernel))
    s = check.CONV_SHAPE
    for fields in check.CONV_CONFIGS:
        build(f"yours {fields}", lambda f=fields: Conv3x3(s, cfg=ConvConfig(**f), kernels=mine)(*ops(s)))
    t = TARGET  # conv_records, then pipelined_records(diagnostics=True) and its unfused path
    build("two-stage", lambda: Conv3x3(t)(*ops(t)))
    build("two-stage unfused", lambda: Conv3x3(t, fused=False)(*ops(t)))
    cfg = PipeConfig(tile_n=64 if t.c_out % 64 == 0 else 32)
    build("pipelined", lambda: PipelinedConv(t, cfg=cfg)(*ops(t)))
    for part in ("gather", "mma"):
        build(f"pipelined {part} only", lambda p=part: PipelinedConv(t, cfg=cfg, parts=p)(*ops(t)))
    build("pipelined unfused", lambda: PipelinedConv(t, fused=False, cfg=cfg)(*ops(t)))
    for dims in REPORT_SHAPES:  # conv_benchmarks
        r = ConvShape(*dims)
        build(f"two-stage {dims}", lambda r=r: Conv3x3(r)(*ops(r)))
        build(f"two-stage unfused {dims}", lambda r=r: Conv3x3(r, fused=False)(*ops(r)))


def notebook_2b(build: Callable[[str, Callable[[], Any]], None]) -> None:
    import cupy as cp

    from utilities.fusion import check
    from utilities.fusion.benchmarks import LOSING, PERSISTENT, PIPELINED, TARGET_SHAPES
    from utilities.fusion.tensorcore import BackToBack, BlockConfig, Kernels, make_b2b_kernel
    from utilities.fusion.tensorcore_persistent import PersistentBackToBack, PipelinedBackToBack

    def ops(m: int, k0: int, n0: int, n1: int, batch: int | None = None) -> list[Any]:
        lead = () if batch is None else (batch,)
        return [cp.zeros((*lead, *s), cp.float16) for s in ((m, k0), (k0, n0), (n0, n1), (m, n1))]

    def streaming(shape: tuple[int, ...], batch: int | None = None, **plan: Any) -> Callable[[], Any]:
        return lambda: BackToBack(*shape, batch=batch, **plan)(*ops(*shape, batch), 0.75, 1.25, -0.5)

    def pipelined(shape: tuple[int, ...]) -> Callable[[], Any]:
        a0, b0, b1, c1 = (x[None] for x in ops(*shape))  # a batch of one, as the notebook and b2b_records pass it
        return lambda: PipelinedBackToBack(a0, b0, shape[3], PIPELINED[shape[1:]])(b1, c1, 0.75, 1.25, -0.5)

    def persistent(shape: tuple[int, ...]) -> Callable[[], Any]:
        plan = PersistentBackToBack(*shape, cfg=PERSISTENT[shape[1:]])
        return lambda: plan(*ops(*shape), 0.75, 1.25, -0.5)

    mine = Kernels(b2b=main_copy(make_b2b_kernel))
    other = check.B2B_CONFIGS[0]  # the check: the contract's other block, then the notebook's, unbatched and batched
    build("yours, other block", streaming(other["shape"], cfg=BlockConfig(**other["block"]), kernels=mine))
    shape = check.B2B_CONFIGS[1]["shape"]
    build("yours, keep D0", streaming(shape, keep_d0=True, kernels=mine))
    build("yours, keep D0, batch 3", streaming(shape, 3, keep_d0=True, kernels=mine))
    build("fused, keep D0 (beside yours)", streaming((2**17, 576, 64, 128), keep_d0=True))
    build("persistent (section 5)", persistent((32 * 300, 64, 256, 64)))
    build("streaming (section 5)", streaming((32 * 300, 64, 256, 64)))
    build("pipelined (section 5)", pipelined((64 * 301, 64, 256, 64)))
    for m in (2**17, 2**18):  # b2b_records
        for k0, n0, n1 in TARGET_SHAPES:
            build(f"fused {(m, k0, n0, n1)}", streaming((m, k0, n0, n1)))
            if (k0, n0, n1) in PERSISTENT:
                build(f"persistent {(m, k0, n0, n1)}", persistent((m, k0, n0, n1)))
            if (k0, n0, n1) in PIPELINED:
                build(f"pipelined {(m, k0, n0, n1)}", pipelined((m, k0, n0, n1)))
    for losing in LOSING:
        build(f"fused {losing}", streaming(losing))
    lever = BlockConfig(tile_m=64, tile_k=64, threads=128)
    build("lever", streaming((256, 576, 64, 128), cfg=lever))


def notebook_2d(build: Callable[[str, Callable[[], Any]], None]) -> None:
    import cupy as cp

    from utilities.conv import check
    from utilities.conv.benchmarks import B2B_TARGET
    from utilities.conv.layout import PipeConfig
    from utilities.conv.reference import B2BShape
    from utilities.conv.tensorcore import Kernels
    from utilities.conv.tensorcore_persistent import ConvB2B, UnfusedConvB2B, make_conv_b2b_kernel

    def ops(s: B2BShape) -> list[Any]:
        sizes = ((s.batch, s.height, s.width, s.c_in), (3, 3, s.c_in, s.c_mid), (s.c_mid, s.c_out), (s.c_out,))
        return [cp.zeros(size, cp.float16) for size in sizes]

    mine = Kernels(conv_b2b=main_copy(make_conv_b2b_kernel))
    s = check.B2B_SHAPE
    for fields in check.CONV_B2B_CONFIGS:  # the check: the contract's block, then the plan's default
        cfg = PipeConfig(tile_n=s.c_mid, **fields) if fields else None
        build(f"yours {fields}", lambda cfg=cfg: ConvB2B(s, cfg=cfg, keep_d0=True, kernels=mine)(*ops(s)))
    t = B2B_TARGET  # b2b_records
    build("fused", lambda: ConvB2B(t)(*ops(t)))
    build("unfused: pipelined 3x3, then 1x1", lambda: UnfusedConvB2B(t)(*ops(t)))


# notebook -> (what it builds, the prebuild jobs that should serve its course kernels)
NOTEBOOKS: dict[str, tuple[Callable[..., None], str]] = {
    "1": (
        notebook_1,
        "multipass:int8:1,multipass:int8:2,multipass:int8:4,multipass:int8:8,multipass:float16:1,multipass:float16:2,"
        "multipass:float16:4,multipass:float16:8,pipeline:int8:256,pipeline:float16:256",
    ),
    "2b": (
        notebook_2b,
        "b2b:576x64x128,b2b:64x256x64,b2b_keep:576x64x128,b2b_keep:64x256x64,b2b_persistent:64x256x64@32x128x3,"
        "b2b_persistent:576x64x128@128x256x3,b2b_pipelined:2560x64x256x64@64x128x32x2,b2b:576x64x128@64x128",
    ),
    "2d": (notebook_2d, "conv_b2b:64x64x64,conv_b2b_keep:64x64x128,conv_pipe:64x64,conv_1x1:64x64"),
    "2a": (notebook_2a, "gemm_bias_relu:512x128x256,gemm_bias_relu:256x256x256@64x128x64x128"),
    "2c": (
        notebook_2c,
        "conv:64x64,conv_unfused:64x64,conv:32x32,conv_unfused:32x32,conv_pipe:64x64,conv_pipe_gather:64x64,"
        "conv_pipe_mma:64x64,conv_pipe_unfused:64x64",
    ),
}


def worker(notebook: str) -> None:
    """Build ``notebook``'s kernels typed only, in this process; print each step's (kernel, key) as one JSON line."""
    from utilities.machinery import cpu_build

    cpu_build.enter(link=False)
    from utilities.machinery import buildcache

    buildcache.install(quiet=True)
    found: dict[str, list[list[str]]] = {}

    def build(step: str, run: Callable[[], Any]) -> None:
        before = len(cpu_build.TYPED)
        run()
        found[step] = [list(pair) for pair in cpu_build.TYPED[before:]]

    NOTEBOOKS[notebook][0](build)
    print(MARK + json.dumps(found), flush=True)


def run_notebook(notebook: str, cache: Path) -> dict[str, list[list[str]]]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "COURSE_SIMULATOR_AUTO")}
    env.update(COURSE_BUILD_CACHE=str(cache), COURSE_CPU_BUILD=os.environ.get("COURSE_CPU_BUILD", "9.0"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", notebook]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode or not lines:
        raise RuntimeError(f"notebook {notebook}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK) :])


def course_kernels(steps: dict[str, list[list[str]]]) -> list[tuple[str, str, str]]:
    """(step, kernel, key) of each course kernel the notebook typed (not the attendee's: those are ``__main__``'s)."""
    return [(step, name, key) for step, pairs in steps.items() for name, key in pairs if "__main__" not in name]


def unserved(steps: dict[str, list[list[str]]], jobs: dict[str, list[list[str]]]) -> list[tuple[str, str, str]]:
    """The notebook's course kernels whose key none of ``jobs`` got."""
    keys = {key for pairs in jobs.values() for _, key in pairs}
    return [(step, name, key) for step, name, key in course_kernels(steps) if key not in keys]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help=f"of {', '.join(NOTEBOOKS)} (default: all)")
    parser.add_argument("--cache", help="the build cache to read (default: a fresh temporary folder)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    sys.path.insert(0, str(ROOT))
    from utilities.machinery import cpu_build

    why = cpu_build.unavailable()
    if why:
        print(f"notebook_keys: cannot build kernels on this CPU: {why}", file=sys.stderr)
        return 2
    tool = _key_determinism()
    missing = 0
    with tempfile.TemporaryDirectory(prefix="notebook-keys-") as scratch:
        cache = Path(args.cache) if args.cache else Path(scratch)
        for notebook in args.notebooks or list(NOTEBOOKS):
            steps = run_notebook(notebook, cache)
            jobs = {job: tool.run([job], False, cache)[job] for job in NOTEBOOKS[notebook][1].split(",")}
            lost = set(unserved(steps, jobs))
            for step, name, key in course_kernels(steps):
                verdict = "no job has this key" if (step, name, key) in lost else "a job's key"
                print(f"notebook_keys: {notebook}: {step}: {name.rsplit('.', 1)[-1]} {key[:12]}: {verdict}", flush=True)
            missing += len(lost)
    return 1 if missing else 0


def _key_determinism() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("key_determinism", ROOT / "tools" / "key_determinism.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    raise SystemExit(main())
