"""After a prebuild, a notebook builds only kernels that hold attendee code: every course kernel configuration that
a notebook's code requests has a prebuild job.

Checked for the cuBLASDx kernels (the builds of minutes), without a GPU, from the notebooks' code (the plans they
construct and the benchmark helpers they call, with the arguments written there) and the benchmark modules'
constants (read from their source, not imported: they need CuPy). A plan or helper given the attendee's code
(``kernel_factory=``, ``kernels=``, ``yours=``, or a helper named ``*yours*`` for its first kernel) builds that code,
which no prebuild can hold; its course twin still counts. The plain numba kernels (the slicing, residues and
statistics of the Ozaki tracks: prebuild's ``PLAIN_JOBS``) are
not modelled here: the GPU run-through's ``course_links`` is their proof.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from utilities import prebuild

ROOT = Path(__file__).resolve().parent.parent
ATTENDEE_KEYWORDS = {"kernel_factory", "kernels", "yours", "residue_factory", "reconstruct_factory", "epilogue_factory"}


def _value(node: ast.AST, names: dict[str, object]) -> object:
    """A literal (tuples, numbers, strings, ``2**16``, ``Config(a=1, ...)`` as a dict, a known name)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_value(e, names) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.Mult):
        left, right = _value(node.left, names), _value(node.right, names)
        return left**right if isinstance(node.op, ast.Pow) else left * right  # type: ignore[operator]
    if isinstance(node, ast.Dict):
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call):
        return {kw.arg: _value(kw.value, names) for kw in node.keywords} | {
            i: _value(a, names) for i, a in enumerate(node.args)
        }
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Attribute) and node.attr in names:
        return names[node.attr]
    raise ValueError(f"not a literal: {ast.unparse(node)}")


def _constants(path: str) -> dict[str, object]:
    """The module-level constants of a source file that are literals."""
    found: dict[str, object] = {}
    for node in ast.parse((ROOT / path).read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name):
            try:
                found[target.id] = _value(node.value, found)
            except (ValueError, TypeError, KeyError):
                pass
    return found


CONSTANTS = {
    **_constants("utilities/fusion/benchmarks.py"),
    **_constants("utilities/multipass/config.py"),
    **_constants("utilities/multipass/benchmarks.py"),
}
CONV = _constants("utilities/conv/benchmarks.py")["TARGET"]  # ConvShape(B, H, W, C_in, C_out) as {0: B, ...}


def _block(cfg: dict, fields: tuple[str, ...]) -> str:
    return "x".join(str(cfg[f]) for f in fields)


def _b2b_jobs(k0: int, n0: int, n1: int, persistent: bool = True, pipelined: bool = True) -> set[str]:
    """What ``b2b_records`` builds at (K0, N0, N1): the streaming kernel, the persistent and pipelined ones."""
    jobs = {f"b2b:{k0}x{n0}x{n1}"}
    cfg = CONSTANTS["PERSISTENT"].get((k0, n0, n1))
    if persistent and cfg:
        jobs.add(f"b2b_persistent:{k0}x{n0}x{n1}@{_block(cfg, ('tile_m', 'threads', 'depth'))}")
    cfg = CONSTANTS["PIPELINED"].get((k0, n0, n1))
    if pipelined and cfg:
        jobs.add(f"b2b_pipelined:{k0}x{n0}x{n1}@{_block(cfg, ('tile_m', 'threads', 'tile_k', 'depth'))}")
    return jobs


def normalized(job: str) -> str:
    """A job as the kernel it builds: the sizes that pick nothing (M, the problem shape; the streaming back-to-back
    kernel's K0) left out, the block kept."""
    kind, _, spec = job.partition(":")
    shape, _, block = spec.partition("@")
    if kind in ("unfused", "partial", "fused"):
        return kind
    if kind == "gemm_bias_relu":
        return kind + (f"@{block}" if block else "")
    if kind in ("b2b", "b2b_keep"):
        return f"{kind}:{'x'.join(shape.split('x')[1:])}" + (f"@{block}" if block else "")
    if kind == "b2b_pipelined":
        return f"{kind}:{'x'.join(shape.split('x')[-3:])}@{block}"
    if kind == "pipeline":
        return f"{kind}:{spec.split(':')[0]}"
    return job


def _keyword(call: ast.Call, name: str, names: dict[str, object]) -> dict | None:
    """The literal value of keyword ``name`` of a call (a config as a dict), None if absent."""
    found = [kw.value for kw in call.keywords if kw.arg == name]
    return _value(found[0], names) if found else None  # type: ignore[return-value]


def _attendee(call: ast.Call) -> bool:
    return any(kw.arg in ATTENDEE_KEYWORDS for kw in call.keywords)


def requested(stem: str) -> tuple[set[str], list[str]]:
    """The course kernels notebook ``stem`` builds (as normalized jobs), and the calls it could not read."""
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    jobs: set[str] = set()
    unread: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.startswith("# SOURCE:"):
            continue
        tree = ast.parse(cell.source)
        names = dict(CONSTANTS)
        for node in ast.walk(tree):  # names bound to literals in the cell (shape = (...)), and loop variables
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                try:
                    names[node.targets[0].id] = _value(node.value, names)
                except (ValueError, TypeError, KeyError):
                    pass
        refused = {  # a plan made to show the error it raises: checked before anything is built
            id(call)
            for t in ast.walk(tree)
            if isinstance(t, ast.Try) and any("ValueError" in ast.unparse(h.type or ast.Name("")) for h in t.handlers)
            for statement in t.body
            for call in ast.walk(statement)
            if isinstance(call, ast.Call)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or id(node) in refused:
                continue
            name = ast.unparse(node.func).split(".")[-1]
            text = ast.unparse(node)
            strings = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            if name == "OzakiGemm" and not _attendee(node):
                found = strings & {"unfused", "partial", "fused"}
                if not found and len(node.args) > 4 and isinstance(node.args[4], ast.Name):  # a variable: the
                    found = {
                        n.value
                        for n in ast.walk(tree)
                        if isinstance(n, ast.Constant)  # variants its cell names
                        and n.value in ("unfused", "partial", "fused")
                    }
                jobs |= found
                if not found:
                    unread.append(text)
            elif name == "ozaki1_fused":
                jobs.add("fused")
            elif name in ("BackToBack", "PersistentBackToBack") and not _attendee(node):
                shape = names.get("shape") if any(isinstance(a, ast.Starred) for a in node.args) else None
                dims = shape if isinstance(shape, tuple) else None
                if dims is None:
                    try:
                        dims = tuple(_value(a, names) for a in node.args[:4])
                    except (ValueError, TypeError, KeyError):
                        unread.append(text)
                        continue
                k0, n0, n1 = dims[1:4]
                keep = any(kw.arg == "keep_d0" for kw in node.keywords)
                if name == "BackToBack":
                    cfg = _keyword(node, "cfg", names)
                    block = f"@{_block(cfg, ('tile_m', 'threads'))}" if cfg else ""
                    jobs.add(f"{'b2b_keep' if keep else 'b2b'}:{k0}x{n0}x{n1}{block}")
                else:
                    jobs |= {j for j in _b2b_jobs(k0, n0, n1, pipelined=False) if j.startswith("b2b_persistent")}
            elif name == "PipelinedBackToBack" and not _attendee(node):
                shape = names.get("shape")
                jobs |= {j for j in _b2b_jobs(*shape[1:4], persistent=False) if j.startswith("b2b_pipelined")}
            elif name == "b2b_records":
                for k0, n0, n1 in (*CONSTANTS["TARGET_SHAPES"], *(s[1:] for s in CONSTANTS["LOSING"])):
                    jobs |= _b2b_jobs(k0, n0, n1)
            elif name == "b2b_yours_beside_ours":
                jobs.add("b2b_keep:576x64x128")  # its default shape: the course's twin of the attendee's kernel
            elif name in ("GemmBiasRelu", "gemm_records") and not _attendee(node):
                jobs.add("gemm_bias_relu")
                cfg = _keyword(node, "cfg" if name == "GemmBiasRelu" else "lever", names)
                if cfg:
                    jobs.add(f"gemm_bias_relu@{_block(cfg, ('tile_m', 'tile_n', 'tile_k', 'threads'))}")
            elif name == "b2b_lever_records":  # its default shape, with the course's block and the lever's
                cfg = _value(node.args[0], names)
                jobs |= {"b2b:576x64x128", f"b2b:576x64x128@{_block(cfg, ('tile_m', 'threads'))}"}
            elif name == "multipass_records":
                kw = {k.arg: _value(k.value, names) for k in node.keywords}
                for dtype in kw.get("dtypes", CONSTANTS["DTYPES"]):
                    jobs |= {f"multipass:{dtype}:{f}" for f in kw.get("fs", CONSTANTS["COURSE_FS"])}
                    jobs.add(f"pipeline:{dtype}")
            elif name == "yours_beside_ours":
                kw = {k.arg: _value(k.value, names) for k in node.keywords}
                dtype = _value(node.args[1], names) if len(node.args) > 1 else "int8"
                jobs.add(f"multipass:{dtype}:{kw.get('fused', 2)}")
            elif name in ("conv_records", "Conv3x3") and not (name == "Conv3x3" and _attendee(node)):
                jobs |= {f"conv:{CONV[4]}x{CONV[3]}", f"conv_unfused:{CONV[4]}x{CONV[3]}"}
    return jobs, unread


GPU_NOTEBOOKS = sorted(
    p.stem
    for p in (ROOT / "solutions").glob("*.ipynb")
    if nbformat.read(p, as_version=4).metadata.get("course", {}).get("gpu", True) is not False
)


@pytest.mark.parametrize("stem", GPU_NOTEBOOKS)
def test_every_course_kernel_a_notebook_builds_is_prebuilt(stem: str) -> None:
    jobs, unread = requested(stem)
    assert not unread, f"{stem}: cannot tell which kernels these build (extend this test): {unread}"
    prebuilt = {normalized(job) for job in prebuild.COURSE_JOBS.split(",")}
    missing = sorted(normalized(job) for job in jobs if normalized(job) not in prebuilt)
    assert not missing, f"{stem} builds course kernels that ./course prebuild does not: {missing}"


def test_the_derivation_sees_the_kernels_of_the_back_to_back_notebook() -> None:
    """The derivation itself, on the notebook with the most kernel kinds."""
    jobs, _ = requested("2b_back_to_back")
    assert {
        "b2b:576x64x128",
        "b2b:64x256x64",
        "b2b:4096x256x64",
        "b2b_keep:576x64x128",
        "b2b_persistent:64x256x64@32x128x3",
        "b2b_persistent:576x64x128@128x256x3",
        "b2b_pipelined:64x256x64@64x128x32x2",
    } <= jobs
    assert normalized("b2b_pipelined:2560x64x256x64@64x128x32x2") == "b2b_pipelined:64x256x64@64x128x32x2"


def test_a_job_left_out_of_the_prebuild_is_named(monkeypatch) -> None:
    jobs = [j for j in prebuild.COURSE_JOBS.split(",") if not j.startswith("b2b_persistent:64x256x64")]
    monkeypatch.setattr(prebuild, "COURSE_JOBS", ",".join(jobs))
    with pytest.raises(AssertionError, match=r"does not: \['b2b_persistent:64x256x64@32x128x3'\]"):
        test_every_course_kernel_a_notebook_builds_is_prebuilt("2b_back_to_back")
