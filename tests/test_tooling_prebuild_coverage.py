"""After a prebuild, a notebook builds only kernels that hold attendee code: every course kernel configuration that
a notebook's code requests has a prebuild job.

Checked for the cuBLASDx kernels (the builds of minutes), without a GPU, from the notebooks' code (the plans they
construct and the benchmark helpers they call, with the arguments written there) and the benchmark modules'
constants (read from their source, not imported: they need CuPy). A plan or helper given the attendee's code
(``kernel_factory=``, ``kernels=``, ``yours=``, or a helper named ``*yours*`` for its first kernel) builds that code,
which no prebuild can hold; its course twin still counts. The plain numba kernels (the slicing, residues and
statistics of the Ozaki tracks: prebuild's ``PLAIN_JOBS``) are
not modelled here: the GPU run-through's ``course_links`` is their proof.

The exercises' checks build the attendee's kernel at every block of their contract (each check module's constant);
each such block must have its course twin among the jobs (``prebuild.kernel_of``: the same kernel's code), so that
the check only links the attendee's kernel against libmathdx code in the cache. The plans' defaults that
``kernel_of`` writes out are held here to the plans' source.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from utilities import prebuild
from utilities.conv import check as conv_check
from utilities.conv.layout import PipeConfig, b2b_config
from utilities.fusion import check as fusion_check
from utilities.multipass import check as multipass_check
from utilities.multipass.config import PassConfig
from utilities.ozaki import check as ozaki_check
from utilities.plans import TileConfig
from utilities.primer import check as primer_check

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


# --- the checks' contracts: the course's twin of every block an exercise's check builds -----------------------------


def _class(path: str, name: str) -> ast.ClassDef:
    return next(n for n in ast.parse((ROOT / path).read_text()).body if isinstance(n, ast.ClassDef) and n.name == name)


def _config_defaults(path: str, name: str) -> dict[str, object]:
    """The fields of config class ``name`` (a TileConfig) in ``path`` with their defaults: TileConfig's, and those
    its own body sets."""
    found: dict[str, object] = {f.name: f.default for f in fields(TileConfig)}
    for node in _class(path, name).body:
        if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            found[node.target.id] = ast.literal_eval(node.value)
    return found


def _plan_default(path: str, plan: str) -> ast.expr:
    """``X`` of the ``cfg or X`` in plan class ``plan``: what the plan builds without a cfg."""
    for node in ast.walk(_class(path, plan)):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and ast.unparse(node.values[0]) == "cfg":
            return node.values[1]
    raise AssertionError(f"{path}: {plan} takes no `cfg or ...` default any more: update prebuild.kernel_of")


def _assigned(path: str, name: str) -> ast.expr:
    return next(
        n.value
        for n in ast.parse((ROOT / path).read_text()).body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == name
    )


def _evaluate(node: ast.expr, names: dict[str, object]) -> dict:
    return eval(compile(ast.Expression(node), "<plan source>", "eval"), dict(names))  # noqa: S307 - our own source


def _make(defaults: dict[str, object]):
    """A config class as the plans call it, making a dict of its fields."""
    return lambda **given: {**defaults, **given}


def _only(block: dict, names: tuple[str, ...]) -> dict:
    return {name: block[name] for name in names}


FUSION_SRC, CONV_SRC, PRIMER_SRC = (
    "utilities/fusion/tensorcore.py",
    "utilities/conv/tensorcore.py",
    "utilities/primer/tensorcore.py",
)


def test_the_plan_defaults_kernel_of_writes_out_are_the_plans():
    """prebuild mirrors four plans' defaults (their modules need a GPU to import): each equal to what the plan's
    source builds without a cfg, evaluated here from that source."""
    tile = _make({f.name: f.default for f in fields(TileConfig)})
    primer = _plan_default(PRIMER_SRC, "TileGemm")
    assert ast.unparse(primer) == "TILE_CONFIG"
    built = _evaluate(
        _assigned(PRIMER_SRC, "TILE_CONFIG"), {"plans": SimpleNamespace(TileConfig=tile), **_constants(PRIMER_SRC)}
    )
    assert _only(built, prebuild.PRIMER_FIELDS) == prebuild.PRIMER_TILE
    block = _make(_config_defaults(FUSION_SRC, "BlockConfig"))
    assert ast.unparse(_plan_default(FUSION_SRC, "GemmBiasRelu")) == "EPILOGUE_BLOCK"
    built = _evaluate(_assigned(FUSION_SRC, "EPILOGUE_BLOCK"), {"BlockConfig": block})
    assert _only(built, prebuild.GEMM_FIELDS) == prebuild.EPILOGUE_BLOCK
    b2b = _plan_default(FUSION_SRC, "BackToBack")
    for n0, n1 in ((64, 128), (128, 64), (128, 128), (256, 64), (64, 256), (160, 96)):
        built = _evaluate(b2b, {"BlockConfig": block, "n0": n0, "n1": n1})
        assert _only(built, ("tile_m", "threads", "depth", "tile_k")) == prebuild.b2b_default(n0, n1), (n0, n1)
    assert ast.unparse(_plan_default(CONV_SRC, "Conv3x3")) == "ConvConfig.for_shape(shape)"
    for_shape = next(
        n.value
        for n in ast.walk(_class(CONV_SRC, "ConvConfig"))
        if isinstance(n, ast.FunctionDef) and n.name == "for_shape"
        for n in n.body
        if isinstance(n, ast.Return)
    )
    conv = _make(_config_defaults(CONV_SRC, "ConvConfig"))
    for c_out, c_in in ((64, 64), (128, 64), (32, 64), (64, 32), (96, 96), (32, 32)):
        shape = SimpleNamespace(c_out=c_out, c_in=c_in)
        built = _evaluate(for_shape, {"cls": conv, "shape": shape})
        assert _only(built, prebuild.CONV_FIELDS) == prebuild.conv_default(c_out, c_in), (c_out, c_in)


def contract_kernels() -> dict[str, str]:
    """Every block of the checks' contracts (read when called) -> the kernel of its course twin, in
    ``prebuild.kernel_of``'s form, made here from the configs as the check cells build them."""
    found: dict[str, str] = {}
    for c in primer_check.CONFIGS:  # 0: TileGemm(m, n, cfg=TileConfig(**fields))
        t = TileConfig(**c)
        found[f"primer.check.CONFIGS {c}"] = f"primer:tile@{t.tile_m}x{t.tile_n}x{t.tile_k}x{t.threads}"
    for dtype, c in multipass_check.CONFIGS.items():  # 1: PassGemm(..., PassConfig(dtype, **fields))
        p = PassConfig(dtype, **c)
        found[f"multipass.check.CONFIGS {dtype}"] = f"multipass:{dtype}:{p.tile_m}x{p.tile_n}x{p.phase_k}x{p.threads}"
    block = _config_defaults(FUSION_SRC, "BlockConfig")
    for c in fusion_check.GEMM_CONFIGS:  # 2a: GemmBiasRelu(..., cfg=BlockConfig(**fields))
        b = {**block, **c}
        found[f"fusion.check.GEMM_CONFIGS {c}"] = (
            f"gemm_bias_relu@{b['tile_m']}x{b['tile_n']}x{b['tile_k']}x{b['threads']}"
        )
    for c in fusion_check.B2B_CONFIGS:  # 2b: BackToBack(*shape, keep_d0=..., cfg=BlockConfig(**block))
        b, (_, _, n0, n1) = {**block, **c["block"]}, c["shape"]
        kind = "b2b_keep" if c["keep_d0"] else "b2b"
        found[f"fusion.check.B2B_CONFIGS {c}"] = f"{kind}:{n0}x{n1}@{b['tile_m']}x{b['threads']}-k{b['tile_k']}"
    conv = _config_defaults(CONV_SRC, "ConvConfig")
    for c in conv_check.CONV_CONFIGS:  # 2c: Conv3x3(shape, cfg=ConvConfig(**fields))
        b = {**conv, **c}
        found[f"conv.check.CONV_CONFIGS {c}"] = f"conv@{b['tile_m']}x{b['tile_n']}x{b['tile_k']}x{b['threads']}"
    s = conv_check.B2B_SHAPE
    for c in conv_check.CONV_B2B_CONFIGS:  # 2d: ConvB2B(shape, cfg=PipeConfig(tile_n=C_mid, **fields) or the plan's
        spec = (PipeConfig(tile_n=s.c_mid, **c) if c else b2b_config(s.c_mid, s.c_out)).spec  # default, keep_d0=True)
        found[f"conv.check.CONV_B2B_CONFIGS {c}"] = f"conv_b2b_keep:{s.c_in}x{s.c_mid}x{s.c_out}@{spec}"
    t = ozaki_check.OTHER_TILE
    for variant in ("unfused", "partial", "fused"):  # 3b, 3c, 3d: OzakiGemm(...) and OzakiGemm(..., cfg=OTHER_TILE)
        found[f"ozaki.check block None ({variant})"] = f"{variant}@gpu"  # the plan's own: the GPU's tile
        tile = "x".join(str(t[f]) for f in ("tile_m", "tile_n", "tile_k", "threads", "depth"))
        found[f"ozaki.check.OTHER_TILE ({variant})"] = f"{variant}@{tile}"
    return found


def test_every_block_of_the_checks_contracts_is_a_twin_whose_code_the_prebuild_keeps():
    """An attendee's edited kernel links the libmathdx code its course twin links: the prebuild keeps that code for
    every block of every contract (``prebuild.check_kernels``), the plan's own block included (3c's and 3d's edits
    generated it in the checks after an edit of the H200 proof at beba95d: 102 s and 58 s)."""
    kept = prebuild.check_kernels()
    missing = sorted(f"{where}: {kernel}" for where, kernel in contract_kernels().items() if kernel not in kept)
    assert not missing, f"blocks whose twin's code a launch-only import leaves out: {missing}"


def test_every_block_of_the_checks_contracts_has_a_prebuild_job():
    prebuilt = {prebuild.kernel_of(job) for job in prebuild.COURSE_JOBS.split(",")}
    missing = sorted(f"{where}: {kernel}" for where, kernel in contract_kernels().items() if kernel not in prebuilt)
    assert not missing, f"checks build kernels at blocks whose course twin ./course prebuild does not: {missing}"


def test_the_contracts_read_here_are_every_kernel_exercises():
    """Every contract the notebooks check at, each block a kernel of its own (the Ozaki-I tile in 3b's, 3c's and
    3d's variant)."""
    kernels = contract_kernels()
    read = {where.split(" ")[0] for where in kernels}
    assert read == {
        "primer.check.CONFIGS",
        "multipass.check.CONFIGS",
        "fusion.check.GEMM_CONFIGS",
        "fusion.check.B2B_CONFIGS",
        "conv.check.CONV_CONFIGS",
        "conv.check.CONV_B2B_CONFIGS",
        "ozaki.check",
        "ozaki.check.OTHER_TILE",
    }
    sizes = [primer_check.CONFIGS, multipass_check.CONFIGS, fusion_check.GEMM_CONFIGS, fusion_check.B2B_CONFIGS]
    sizes += [conv_check.CONV_CONFIGS, conv_check.CONV_B2B_CONFIGS]
    assert len(kernels) == len(set(kernels.values())) == sum(len(c) for c in sizes) + 6
    assert kernels[f"fusion.check.B2B_CONFIGS {fusion_check.B2B_CONFIGS[0]}"] == "b2b:128x64@64x256-k32"


def test_a_block_added_to_a_contract_without_its_job_is_named(monkeypatch):
    extra = {"tile_m": 32, "tile_n": 64, "tile_k": 64, "threads": 128}
    monkeypatch.setattr(primer_check, "CONFIGS", (*primer_check.CONFIGS, extra))
    with pytest.raises(AssertionError, match=r"primer:tile@32x64x64x128"):
        test_every_block_of_the_checks_contracts_has_a_prebuild_job()
    monkeypatch.setattr(ozaki_check, "OTHER_TILE", {**ozaki_check.OTHER_TILE, "depth": 4})
    with pytest.raises(AssertionError, match=r"partial@64x64x64x128x4"):
        test_every_block_of_the_checks_contracts_has_a_prebuild_job()
    kept = [{**c, "keep_d0": True} for c in fusion_check.B2B_CONFIGS]  # 2b's other plan keeping D0: another kernel
    monkeypatch.setattr(fusion_check, "B2B_CONFIGS", tuple(kept))
    with pytest.raises(AssertionError, match=r"b2b_keep:128x64@64x256-k32"):
        test_every_block_of_the_checks_contracts_has_a_prebuild_job()
    # the prebuild reads the contracts when asked: the blocks get their jobs (COURSE_JOBS is made at import)
    twins = prebuild.missing_twins(prebuild.COURSE_JOBS)
    assert {"primer:tile@32x64x64x128", "partial:300x136x392@64x64x64x128x4", "b2b_keep:288x128x64@64x256-k32"} <= set(
        twins
    )
