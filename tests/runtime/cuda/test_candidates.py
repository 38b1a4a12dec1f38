"""CUDA candidates on the CPU: the launch-header contract, resolving it for shapes, nvcc
compiling a correct and a broken kernel, the cubin cache, and cache artifacts carrying cubins.
Compiling needs nvcc (skipped cleanly without it); nothing here needs a GPU."""

import ctypes
import os
import types

import pytest
import torch
from cuda_sources import (
    CUTE_SCALE,
    DOES_NOT_COMPILE,
    NOT_EXTERN_C,
    ROW_SOFTMAX,
    VECTOR_ADD,
)

from kernelpro_backend.cache import KernelArtifact, KernelCache, cache_key
from kernelpro_backend.runtime import EvalStatus, Job, SourceCandidate
from kernelpro_backend.runtime.cuda import driver as cuda_driver
from kernelpro_backend.runtime.cuda.compile import (
    LOG_LINES,
    CudaCompileError,
    arch_for_capability,
    compile_cuda,
    cutlass_include_dirs,
    find_nvcc,
    trim_log,
)
from kernelpro_backend.runtime.cuda.plan import resolve
from kernelpro_backend.runtime.cuda.source import LaunchSpecError, TensorMeta, parse_launch
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job
from kernelpro_backend.tuner import load_artifact, winner_fields

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed here")
ARCH = "sm_90a"


def meta(*shape, dtype="float32"):
    strides, running = [], 1
    for size in reversed(shape):
        strides.insert(0, running)
        running *= size
    return TensorMeta(tuple(shape), tuple(strides), dtype)


@pytest.fixture(autouse=True)
def _private_cubin_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELPRO_CUBIN_DIR", str(tmp_path / "cubins"))


def header(body):
    return f'/* kernelpro-launch\n{body}\n*/\nextern "C" __global__ void k(float* x) {{}}\n'


# --- the contract -------------------------------------------------------------------------


def test_vector_add_header_resolves_for_odd_sizes():
    spec = parse_launch(VECTOR_ADD, "vector_add")
    plan = resolve(spec, [meta(3, 1001), meta(3, 1001)])
    (step,) = plan.steps
    assert step.kernel == "vector_add"
    assert step.grid == (-(-3003 // 256), 1, 1) and step.block == (256, 1, 1) and step.smem == 0
    assert [a.tensor for a in step.args] == ["in0", "in1", "out0", None]
    assert (step.args[3].ctype, step.args[3].value) == ("i64", 3003)
    (out,) = plan.outputs
    assert (out.shape, out.stride, out.dtype, out.zeros) == ((3, 1001), (1001, 1), "float32", False)


def test_row_softmax_header_reads_strides_of_inputs_and_outputs():
    spec = parse_launch(ROW_SOFTMAX, "row_softmax")
    x = TensorMeta((7, 50), (64, 1), "float32")  # padded rows: the kernel gets ld = 64
    (step,) = resolve(spec, [x]).steps
    assert step.grid == (7, 1, 1) and step.smem == 1024
    assert [a.value for a in step.args[2:]] == [50, 64, 50]


def test_contract_text_carries_its_example_and_every_key():
    from kernelpro_backend.runtime.cuda.source import CONTRACT

    for word in ("kernelpro-launch", '"outputs"', '"scratch"', '"launches"', '{"i64": expr}'):
        assert word in CONTRACT
    assert CONTRACT.startswith("`source` is CUDA C++")  # the rules, not the module's title
    assert "Must not:" not in CONTRACT
    start = CONTRACT.index("/* kernelpro-launch\n")
    example = CONTRACT[start : CONTRACT.index("*/", start) + 2]
    spec = parse_launch(example.replace("\n    ", "\n"), "row_softmax")
    assert resolve(spec, [meta(8, 40)]).steps[0].args[2].value == 40


def test_python_literal_header_and_several_launches():
    text = header(
        "{'outputs': [{'shape': ['in0.shape[0]', 'max(in0.shape[1] // 2, 1)'],"
        " 'dtype': 'bfloat16', 'init': 'zeros', 'stride': [1, 'in0.shape[0]']}],"
        " 'scratch': [{'bytes': 'in0.numel() * 4', 'init': 'zeros'}],"
        " 'launches': [{'grid': ['cdiv(in0.numel(), 128)', 2], 'block': [128], 'args': ['tmp0']},"
        "              {'kernel': 'k2', 'grid': [1], 'block': [32, 2], 'smem': 'out0.numel() * 2',"
        "               'args': ['tmp0', 'out0', {'f32': '1 / in0.shape[1]'}]},],}"
    )
    spec = parse_launch(text, "k")
    assert spec.kernels == ("k", "k2")
    plan = resolve(spec, [meta(6, 10)])
    assert plan.outputs[0].shape == (6, 5) and plan.outputs[0].stride == (1, 6)
    assert plan.outputs[0].zeros and plan.scratch == ((240, True),)
    first, second = plan.steps
    assert first.grid == (1, 2, 1) and second.block == (32, 2, 1) and second.smem == 60
    assert second.args[2].ctype == "f32" and second.args[2].value == pytest.approx(0.1)


@pytest.mark.parametrize(
    "source, expected",
    [
        ('extern "C" __global__ void k() {}', "exactly one"),
        (header("{not json"), "neither JSON nor a Python literal"),
        (header('{"outputs": []}'), "non-empty list"),
        (
            header('{"outputs": [{"shape": "in0.shape"}], "grid": [1], "block": [1], "args": []}'),
            '"shape" and "dtype"',
        ),
        (
            header('{"outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}], "grid": [1]}'),
            "lacks block, args",
        ),
        (
            header(
                '{"outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}], "grid": [1],'
                ' "block": [1], "args": ["x0"]}'
            ),
            "typed scalar",
        ),
        (
            header(
                '{"outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}], "grid": [1],'
                ' "block": [1], "args": [{"i32": "__import__(\'os\')"}]}'
            ),
            "literal 'os' is not allowed",
        ),
        (
            header(
                '{"outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}], "grid": [1],'
                ' "block": [1], "args": [{"i32": "open(1)"}]}'
            ),
            "may be called",
        ),
        (
            header(
                '{"outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}], "grid": [1],'
                ' "block": [1], "args": [{"i32": "[1, 2]"}]}'
            ),
            "List is not allowed",
        ),
    ],
)
def test_malformed_headers_say_what_to_fix(source, expected):
    with pytest.raises(LaunchSpecError, match=expected.replace("(", r"\(").replace("[", r"\[")):
        resolve(parse_launch(source, "k"), [meta(4, 4)])


@pytest.mark.parametrize(
    "launch, expected",
    [
        ('"grid": [1], "block": [1025], "args": []', "more than 1024"),
        ('"grid": ["in0.shape[0] - 4"], "block": [1], "args": []', "must be >= 1"),
        ('"grid": [1, 70000], "block": [1], "args": []', "exceeds the limit 65535"),
        ('"grid": [1], "block": [1], "args": ["out3"]', "no tensor named 'out3'"),
        ('"grid": [1], "block": [1], "args": [{"i32": "in0.numel() << 28"}]', "does not fit"),
        ('"grid": [1], "block": [1], "args": [{"i32": "2 ** 3"}]', "Pow is not allowed"),
        ('"grid": [1], "block": [1], "args": [{"i32": "\'a\' * 3"}]', "literal 'a' is not"),
        ('"grid": [1], "block": [1], "args": [{"i32": "in2.shape[0]"}]', "unknown name 'in2'"),
        ('"grid": [1], "block": [1], "args": [{"i32": "in0.shape[5]"}]', "out of range"),
        ('"grid": ["in0.shape[0] / 2"], "block": [1], "args": []', "not an integer"),
        ('"grid": [1], "block": [1], "args": [{"i32": "in0.__class__"}]', "not allowed"),
    ],
)
def test_headers_that_do_not_fit_the_inputs_are_rejected(launch, expected):
    text = header(f'{{"outputs": [{{"shape": "in0.shape", "dtype": "in0.dtype"}}], {launch}}}')
    with pytest.raises(LaunchSpecError, match=expected.replace("(", r"\(").replace("[", r"\[")):
        resolve(parse_launch(text, "k"), [meta(4, 4)])


def test_arch_is_arch_specific_from_hopper_on():
    assert arch_for_capability(8, 6) == "sm_86"
    assert arch_for_capability(9, 0) == "sm_90a"


def test_trim_log_keeps_errors_with_context_and_bounds_length(tmp_path):
    workdir = str(tmp_path)
    noise = [f"{workdir}/candidate.cu(3): warning #177-D: variable declared but never used"] * 5
    errors = [
        f"{workdir}/candidate.cu({i}): error: bad thing {i}\n  code line\n  ^" for i in range(30)
    ]
    trimmed = trim_log("\n".join(noise + errors), workdir)
    lines = trimmed.splitlines()
    assert lines[0] == "candidate.cu(0): error: bad thing 0" and lines[1] == "  code line"
    assert len(lines) == LOG_LINES + 1 and lines[-1].startswith("... (")
    assert "warning" not in trimmed and workdir not in trimmed


# --- compiling with nvcc ------------------------------------------------------------------


@needs_nvcc
def test_nvcc_compiles_a_cubin_and_the_second_compile_is_a_cache_hit(tmp_path):
    first = compile_cuda(VECTOR_ADD, ARCH, kernels=["vector_add"], cubin_dir=tmp_path)
    assert first.data[:4] == b"\x7fELF" and b"vector_add\0" in first.data
    assert not first.cached and first.path is not None and first.path.read_bytes() == first.data
    assert first.compiler.startswith("nvcc ") and "-arch=sm_90a" in first.flags
    again = compile_cuda(VECTOR_ADD, ARCH, kernels=["vector_add"], cubin_dir=tmp_path)
    assert again.cached and again.data == first.data and again.path == first.path
    other_arch = compile_cuda(VECTOR_ADD, "sm_80", kernels=["vector_add"], cubin_dir=tmp_path)
    assert not other_arch.cached and other_arch.path != first.path


@needs_nvcc
@pytest.mark.skipif(not cutlass_include_dirs(), reason="CUTLASS headers (nvidia-cutlass) absent")
def test_cute_source_compiles_with_the_wheel_headers(tmp_path):
    cubin = compile_cuda(CUTE_SCALE, ARCH, kernels=["cute_scale"], cubin_dir=tmp_path)
    assert any(f.startswith("-I") and f.endswith("include") for f in cubin.flags)
    assert b"cute_scale\0" in cubin.data


@needs_nvcc
def test_nvcc_error_is_a_readable_compile_error(tmp_path):
    with pytest.raises(CudaCompileError) as info:
        compile_cuda(DOES_NOT_COMPILE, ARCH, cubin_dir=tmp_path)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("nvcc: 1 error; first: candidate.cu(")
    assert 'identifier "undefined_name" is undefined' in first_line
    assert "undefined_name[i]" in info.value.log  # the offending source line, with its caret
    assert not list(tmp_path.rglob("*.cubin"))  # failures are not cached


@needs_nvcc
def test_kernel_without_extern_c_is_reported_by_name(tmp_path):
    with pytest.raises(
        CudaCompileError,
        match=r"vector_add not found in the compiled cubin: .* `extern \"C\" __global__`",
    ):
        compile_cuda(NOT_EXTERN_C, ARCH, kernels=["vector_add"], cubin_dir=tmp_path)


@needs_nvcc
def test_compile_error_reaches_the_evaluator_as_compile_error(
    monkeypatch, tmp_path, softmax_subgraph
):
    # Stand in for a device: the worker compiles for sm_90a and fails before loading anything.
    monkeypatch.setattr(cuda_driver, "current_arch", lambda device=None: ARCH)
    broken = SourceCandidate("cuda", DOES_NOT_COMPILE, "vector_add")
    result = evaluate_job(Job.from_subgraph(softmax_subgraph, broken), WorkerState(tmp_path))
    assert result.status is EvalStatus.COMPILE_ERROR
    assert "undefined_name" in result.message and "CudaCompileError" in result.message
    assert "undefined_name[i]" in result.details["compiler_log"]
    assert not result.details["fatal"]


def test_cuda_candidate_without_a_device_is_a_compile_error(tmp_path, softmax_subgraph):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    candidate = SourceCandidate("cuda", ROW_SOFTMAX, "row_softmax")
    result = evaluate_job(Job.from_subgraph(softmax_subgraph, candidate), WorkerState(tmp_path))
    assert result.status is EvalStatus.COMPILE_ERROR and "needs a CUDA device" in result.message


# --- cache artifacts ----------------------------------------------------------------------


@needs_nvcc
def test_cuda_winner_artifact_round_trips_with_its_cubin(monkeypatch, tmp_path, softmax_subgraph):
    monkeypatch.setattr(cuda_driver, "current_arch", lambda device=None: ARCH)
    winner = SourceCandidate("cuda", ROW_SOFTMAX, "row_softmax")
    fields = winner_fields(winner, render=None)
    assert fields["binary"][:4] == b"\x7fELF" and b"row_softmax\0" in fields["binary"]
    assert fields["launch"]["arch"] == ARCH and fields["launch"]["header"]["block"] == [256]
    artifact = KernelArtifact(**fields, kernel_ms=0.01, pattern=softmax_subgraph.pattern)
    key = cache_key(softmax_subgraph.key)
    with KernelCache(tmp_path / "kp") as cache:
        cache.put(key, artifact)
        stored = cache.get(key)
    assert stored is not None and stored.binary == artifact.binary
    assert (stored.language, stored.entry, stored.launch) == (
        "cuda",
        "row_softmax",
        fields["launch"],
    )


def test_cuda_artifact_without_cubin_does_not_load():
    artifact = KernelArtifact(language="cuda", source=ROW_SOFTMAX, entry="row_softmax")
    with pytest.raises(ValueError, match="no cubin"):
        load_artifact(artifact)


# --- the driver layer against a fake driver (the real one runs in the GPU tests) -----------


class _Result(int):
    """A CUresult stand-in: an int with the enum's name."""

    def __new__(cls, value, name):
        result = super().__new__(cls, value)
        result.name = name
        return result


OK_RESULT = _Result(0, "CUDA_SUCCESS")


class FakeDriver:
    """Answers the calls CudaKernel makes; kernels have the parameter sizes given."""

    CUfunction_attribute = types.SimpleNamespace(
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED="non-portable-cluster"
    )

    def __init__(self, params):
        self.params, self.launches, self.attributes = params, [], {}

    def cuFuncSetAttribute(self, function, attr, value):
        self.attributes[(function, attr)] = value
        return (OK_RESULT,)

    def cuInit(self, flags):
        return (OK_RESULT,)

    def cuDeviceGet(self, ordinal):
        return OK_RESULT, ordinal

    def cuDevicePrimaryCtxRetain(self, dev):
        return OK_RESULT, 1234

    def cuCtxGetCurrent(self):
        return OK_RESULT, 0

    def cuCtxSetCurrent(self, ctx):
        return (OK_RESULT,)

    def cuModuleLoadData(self, image):
        return OK_RESULT, "module"

    def cuModuleGetFunction(self, module, name):
        if name.decode() not in self.params:
            return _Result(500, "CUDA_ERROR_NOT_FOUND"), None
        return OK_RESULT, name.decode()

    def cuFuncGetParamInfo(self, function, index):
        sizes = self.params[function]
        if index >= len(sizes):
            return _Result(1, "CUDA_ERROR_INVALID_VALUE"), 0, 0
        return OK_RESULT, 8 * index, sizes[index]

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        # Read the parameters back the way the driver does: params is a void** array.
        count = len(self.params[f])
        pointers = (ctypes.c_void_p * count).from_address(params)
        values = [ctypes.c_int64.from_address(p).value for p in pointers]
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, values))
        return (OK_RESULT,)


def fake_kernel(monkeypatch, source, entry, params):
    driver = FakeDriver(params)
    monkeypatch.setattr(cuda_driver, "driver_api", lambda: driver)
    return cuda_driver.CudaKernel(b"\x7fELF", parse_launch(source, entry), device=0)


def test_parameter_layout_matching_the_header_loads(monkeypatch):
    kernel = fake_kernel(monkeypatch, VECTOR_ADD, "vector_add", {"vector_add": [8, 8, 8, 8]})
    assert kernel.device == torch.device("cuda", 0) and kernel.name == "cuda-vector_add"
    # every kernel may declare clusters past the portable 8 CTAs (row_cluster uses 16)
    assert kernel._driver.attributes == {("vector_add", "non-portable-cluster"): 1}


def test_parameter_layout_differing_from_the_header_is_a_launch_spec_error(monkeypatch):
    with pytest.raises(LaunchSpecError, match=r"takes 4 parameters of \[8, 8, 8, 4\] bytes"):
        fake_kernel(monkeypatch, VECTOR_ADD, "vector_add", {"vector_add": [8, 8, 8, 4]})


def test_launch_passes_pointers_and_scalars_on_torch_stream(monkeypatch):
    kernel = fake_kernel(monkeypatch, VECTOR_ADD, "vector_add", {"vector_add": [8, 8, 8, 8]})
    kernel.device = torch.device("cpu")  # the fake launches nothing: host tensors will do
    stream = type("Stream", (), {"cuda_stream": 77})()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    x, y = torch.randn(3, 1001), torch.randn(3, 1001)
    (out,) = kernel(x, y)
    kernel(x, y)  # the second call reuses the resolved plan
    assert out.shape == (3, 1001) and out.dtype == torch.float32
    assert len(kernel._plans) == 1 and len(kernel._driver.launches) == 2
    name, grid, block, smem, on_stream, values = kernel._driver.launches[0]
    assert (name, grid, block, smem, on_stream) == ("vector_add", (12, 1, 1), (256, 1, 1), 0, 77)
    assert values == [x.data_ptr(), y.data_ptr(), out.data_ptr(), 3003]


def test_missing_kernel_symbol_is_a_launch_spec_error(monkeypatch):
    with pytest.raises(LaunchSpecError, match=r"finding kernel 'vector_add'.*CUDA_ERROR_NOT_FOUND"):
        fake_kernel(monkeypatch, VECTOR_ADD, "vector_add", {"other": []})


def test_every_dynamic_shared_memory_amount_is_opted_in_once():
    """Without the attribute a launch may take 48 KiB less the kernel's static shared memory:
    a row kernel asking exactly 48 KiB beside its static arrays was refused on the H100, so the
    launcher opts in any dynamic amount (once per kernel and size), with a fake driver here."""
    calls = []

    class Driver:
        class CUfunction_attribute:  # noqa: N801 - the driver API's name
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max-dynamic"

        @staticmethod
        def cuFuncSetAttribute(function, attr, value):  # noqa: N802 - the driver API's name
            calls.append((function, attr, value))
            return 0

    kernel = object.__new__(cuda_driver.CudaKernel)
    kernel.spec = parse_launch(
        header(
            '{"outputs": [{"shape": ["in0.shape[0]"], "dtype": "float32"}], "grid": [1],'
            ' "block": [32], "smem": 49152, "args": ["in0", "out0"]}'
        ),
        "k",
    )
    kernel._functions, kernel._smem_opted, kernel._driver = {"k": "fn"}, {}, Driver
    x = torch.zeros(4)
    for _ in range(2):
        _, steps = kernel._plan([x])
        assert steps[0][3] == 49152
    assert calls == [("fn", "max-dynamic", 49152)]


def test_nvcc_still_running_at_exit_is_killed_with_its_children(tmp_path):
    """A background build (a daemon thread) must not leave nvcc and its children running
    after the process exits: the exit hook kills each run's process group."""
    import threading
    import time

    from kernelpro_backend.runtime.cuda import compile as cuda_compile

    fake = tmp_path / "nvcc"
    child = tmp_path / "child.pid"
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {child}\nwait\n")
    fake.chmod(0o755)
    errors = []

    def build():
        try:
            cuda_compile.run_nvcc(str(fake), "// nothing", [], timeout_s=120)
        except cuda_compile.CudaCompileError as e:
            errors.append(str(e))

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (child.exists() and child.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cuda_compile._RUNNING, "the run is not registered while it runs"
    cuda_compile.kill_running_nvcc()
    thread.join(30)
    assert not thread.is_alive() and errors and "killed" in errors[0]
    pid = int(child.read_text())
    for _ in range(100):  # the grandchild (cicc, ptxas in a real nvcc) is gone too
        if not _running(pid):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"child {pid} of the killed nvcc still runs")
    assert not cuda_compile._RUNNING


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for a reaper that a container may lack)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
