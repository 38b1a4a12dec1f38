"""Loading a cubin with the CUDA driver API and launching its kernels on torch's stream.

Owns: `RawKernel` (one kernel launched with ctypes arguments where it is told to write: the
package's own fixed kernels), `zeroed_word` (a counter for them), `smem_optin_limit`,
`CudaKernel` (a callable over the subgraph inputs: cuModuleLoadData + cuModuleGetFunction at
load, one resolved launch plan per input signature, fresh outputs per call, cuLaunchKernel on
torch's current stream, so CUDA-graph capture records it), the parameter-layout check against
the cubin (cuFuncGetParamInfo, where the driver has it), the >48 KiB dynamic shared memory
opt-in, and `load_cuda_source` / `load_cubin`: a candidate compiled now, or a cached cubin
loaded without any compiler.
Must not: compile (compile.py) or parse launch headers (source.py).

Errors: a launch the device refuses for its configuration (too many threads, registers or
shared memory; wrong parameter layout) raises LaunchSpecError, which the evaluator reports as
compile_error; any other driver error raises CudaDriverError, whose "CUDA error" text marks
the worker's context as unusable (worker.is_fatal).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import CandidateLoadError
from .compile import NVCC_TIMEOUT_S, arch_for_capability, compile_cuda
from .plan import ResolvedLaunch, contiguous_strides, resolve
from .source import LaunchSpec, LaunchSpecError, TensorMeta, parse_launch

_CTYPES: dict[str, Any] = {
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}
_POINTER_BYTES = ctypes.sizeof(ctypes.c_void_p)
# Errors that say the launch configuration or the image does not fit this kernel or device:
# the candidate's fault, reported as compile_error; the context stays usable.
_CONFIG_ERRORS = {
    "CUDA_ERROR_INVALID_VALUE",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    "CUDA_ERROR_NOT_FOUND",
    "CUDA_ERROR_INVALID_IMAGE",
    "CUDA_ERROR_NO_BINARY_FOR_GPU",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
}


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed for a reason other than the launch configuration."""


def driver_api() -> Any:
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[attr-defined,no-redef]
        except ImportError:
            raise CandidateLoadError(
                "CUDA candidates need cuda-python for the driver API: pip install cuda-python"
            ) from None
    return driver


def _check(driver: Any, result: Any, what: str) -> Any:
    """The call's value(s); raises on a non-success status."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        if name in _CONFIG_ERRORS:
            raise LaunchSpecError(f"{what}: the driver refused it ({name})")
        raise CudaDriverError(f"CUDA error: {name} in {what}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def _param_sizes(driver: Any, function: Any) -> list[int] | None:
    """Sizes of the kernel's parameters from the cubin, or None where the driver cannot say."""
    if not hasattr(driver, "cuFuncGetParamInfo"):
        return None
    sizes: list[int] = []
    for index in range(4096):
        err, *rest = driver.cuFuncGetParamInfo(function, index)
        if int(err) == 0:
            sizes.append(int(rest[-1]))
        elif getattr(err, "name", "") == "CUDA_ERROR_INVALID_VALUE":
            return sizes  # index == the number of parameters
        else:
            return None  # e.g. CUDA_ERROR_NOT_SUPPORTED on a driver older than 12.4
    return None


def _allow_large_clusters(driver: Any, function: Any) -> None:
    """Let a kernel declare clusters of up to 16 CTAs (`__cluster_dims__`; 8 is the portable
    limit). Drivers without the attribute keep the limit; a larger cluster then fails at
    launch with the driver's error, which the evaluator reports."""
    attr = getattr(
        driver.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", None
    )
    if attr is not None:
        driver.cuFuncSetAttribute(function, attr, 1)


class CudaKernel:
    """The kernels of one cubin, called like a subgraph: kernel(*inputs) -> [outputs]."""

    def __init__(
        self, cubin: bytes, spec: LaunchSpec, device: torch.device | int | None = None
    ) -> None:
        self.spec = spec
        self.cubin = cubin  # the machine code, for the SASS tool of the search's feedback
        if device is None:
            index = torch.cuda.current_device()
        elif isinstance(device, int):
            index = device
        else:
            index = torch.device(device).index or 0
        self.device = torch.device("cuda", index)
        self.name = f"cuda-{spec.launches[0].kernel}"
        driver = self._driver = driver_api()
        _check(driver, driver.cuInit(0), "cuInit")
        dev = _check(driver, driver.cuDeviceGet(self.device.index), "cuDeviceGet")
        # torch runs on the device's primary context: load the module into that one.
        self._context = _check(driver, driver.cuDevicePrimaryCtxRetain(dev), "retaining context")
        self._dev = dev
        self._thread = threading.local()
        self._make_current()
        self._module = _check(driver, driver.cuModuleLoadData(cubin), "loading the cubin")
        self._functions = {}
        for name in spec.kernels:
            self._functions[name] = _check(
                driver,
                driver.cuModuleGetFunction(self._module, name.encode()),
                f'finding kernel {name!r} (declare it extern "C" __global__)',
            )
        for function in self._functions.values():
            _allow_large_clusters(driver, function)
        self._check_params()
        self._smem_opted: dict[str, int] = {}
        self._plans: dict[tuple[Any, ...], tuple[ResolvedLaunch, list[Any]]] = {}

    def _make_current(self) -> None:
        if getattr(self._thread, "ready", False):
            return
        driver = self._driver
        current = _check(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) != int(self._context):
            _check(driver, driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")
        self._thread.ready = True

    def _check_params(self) -> None:
        for i, step in enumerate(self.spec.launches):
            sizes = _param_sizes(self._driver, self._functions[step.kernel])
            if sizes is None:
                continue
            want = [
                _POINTER_BYTES if a.tensor else ctypes.sizeof(_CTYPES[str(a.ctype)])
                for a in step.args
            ]
            if sizes != want:
                raise LaunchSpecError(
                    f"launch {i}: kernel {step.kernel!r} takes {len(sizes)} parameters of "
                    f"{sizes} bytes, the header passes {len(want)} of {want} bytes; make "
                    '"args" match the kernel signature (pointers are 8 bytes, i32/u32/f32 4)'
                )

    def _plan(self, inputs: Sequence[torch.Tensor]) -> tuple[ResolvedLaunch, list[Any]]:
        metas = [
            TensorMeta(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))
            for t in inputs
        ]
        resolved = resolve(self.spec, metas)
        steps = []
        for step in resolved.steps:
            function = self._functions[step.kernel]
            # Without the attribute a launch may take 48 KiB less the kernel's static shared
            # memory: 48 KiB of dynamic memory beside any static array was refused
            # (CUDA_ERROR_INVALID_VALUE), so every dynamic amount is opted in, once per size.
            if step.smem > self._smem_opted.get(step.kernel, 0):
                self._opt_in_smem(step.kernel, function, step.smem)
            args = [
                _tensor_ref(a.tensor) if a.tensor else _CTYPES[str(a.ctype)](a.value)
                for a in step.args
            ]
            steps.append((function, step.grid, step.block, step.smem, args, step.kernel))
        return resolved, steps

    def _opt_in_smem(self, kernel: str, function: Any, smem: int) -> None:
        driver = self._driver
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        err = driver.cuFuncSetAttribute(function, attr, smem)
        if int(err[0] if isinstance(err, tuple) else err) != 0:
            limit = smem_optin_limit(self.device.index or 0)
            raise LaunchSpecError(
                f"kernel {kernel!r} asks for {smem} bytes of dynamic shared memory; this device "
                f"allows {limit} per block (minus the kernel's static shared memory)"
            )
        self._smem_opted[kernel] = smem

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        for k, t in enumerate(inputs):
            if t.device != self.device:
                raise ValueError(
                    f"input {k} is on {t.device}; this kernel was loaded on {self.device}"
                )
        key = tuple((t.shape, t.stride(), t.dtype) for t in inputs)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(inputs)
        resolved, steps = plan
        outputs = [
            _allocate(o.shape, o.stride, o.dtype, o.zeros, self.device) for o in resolved.outputs
        ]
        scratch = [
            (torch.zeros if zeros else torch.empty)(n, dtype=torch.uint8, device=self.device)
            for n, zeros in resolved.scratch
        ]
        groups = (inputs, outputs, scratch)
        self._make_current()
        stream = torch.cuda.current_stream(self.device).cuda_stream
        driver = self._driver
        for function, grid, block, smem, args, kernel in steps:
            values = [
                ctypes.c_void_p(groups[a[0]][a[1]].data_ptr()) if isinstance(a, tuple) else a
                for a in args
            ]
            pointers = (ctypes.c_void_p * max(1, len(values)))(
                *[ctypes.addressof(v) for v in values]
            )
            result = driver.cuLaunchKernel(
                function, *grid, *block, smem, stream, ctypes.addressof(pointers), 0
            )
            _check(driver, result, f"launching {kernel!r} grid {grid} block {block} smem {smem}")
        return outputs


@functools.cache
def smem_optin_limit(device: int) -> int:
    """The most dynamic shared memory one block may opt into on `device` (the driver's
    attribute)."""
    driver = driver_api()
    _check(driver, driver.cuInit(0), "cuInit")
    attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    dev = _check(driver, driver.cuDeviceGet(device), "cuDeviceGet")
    return int(_check(driver, driver.cuDeviceGetAttribute(attr, dev), "smem opt-in limit"))


def zeroed_word(device: int, stream: int) -> int:
    """The address of 4 bytes of `device` memory from the driver's allocator (outside torch's
    caching allocator and any CUDA-graph pool; never freed), zeroed on `stream`."""
    driver = driver_api()
    with torch.cuda.device(device):  # torch's primary context
        word = _check(driver, driver.cuMemAlloc(4), "allocating a device word")
        _check(driver, driver.cuMemsetD32Async(word, 0, 1, stream), "zeroing a device word")
    return int(word)


class RawKernel:
    """One kernel of a cubin loaded into `device`'s primary context (torch's), launched with
    its arguments as ctypes values on torch's current stream — for the package's own fixed
    kernels (no launch header, no fresh outputs: they write where they are told)."""

    def __init__(self, cubin: bytes, name: str, device: int, max_smem: int = 0) -> None:
        self.name, self.device = name, device
        driver = self._driver = driver_api()
        with torch.cuda.device(device):  # torch's primary context, current on this thread
            torch.cuda.current_stream(device)
            self._module = _check(driver, driver.cuModuleLoadData(cubin), "loading the cubin")
        self._function = _check(
            driver, driver.cuModuleGetFunction(self._module, name.encode()), f"finding {name!r}"
        )
        if max_smem:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver, driver.cuFuncSetAttribute(self._function, attr, max_smem), "smem")

    def launch(
        self,
        grid: int,
        block: int,
        smem: int,
        args: Sequence[Any],
        what: str = "",
        stream: int | None = None,
    ) -> None:
        """On `stream` (a CUstream handle), by default torch's current stream on the device."""
        pointers = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
        if stream is None:
            stream = torch.cuda.current_stream(self.device).cuda_stream
        call = (self._function, grid, 1, 1, block, 1, 1, smem, stream, ctypes.addressof(pointers))
        if self.device == torch.cuda.current_device():
            result = self._driver.cuLaunchKernel(*call, 0)
        else:  # the module and the stream belong to that device's context
            with torch.cuda.device(self.device):
                result = self._driver.cuLaunchKernel(*call, 0)
        _check(self._driver, result, f"launching {self.name!r}{what}")


_GROUPS = ("in", "out", "tmp")


def _tensor_ref(name: str) -> tuple[int, int]:
    """ "out2" -> (1, 2): which of (inputs, outputs, scratch), and the index in it."""
    group = name.rstrip("0123456789")
    return _GROUPS.index(group), int(name[len(group) :])


def _allocate(
    shape: tuple[int, ...], stride: tuple[int, ...], dtype: str, zeros: bool, device: torch.device
) -> torch.Tensor:
    torch_dtype = getattr(torch, dtype)
    if stride == contiguous_strides(shape):
        make = torch.zeros if zeros else torch.empty
        return make(shape, dtype=torch_dtype, device=device)
    out = torch.empty_strided(shape, stride, dtype=torch_dtype, device=device)
    return out.zero_() if zeros else out


def current_arch(device: torch.device | int | None = None) -> str:
    """The cubin target of a CUDA device ("sm_90a" on an H100)."""
    if not torch.cuda.is_available():
        raise CandidateLoadError("a CUDA kernel needs a CUDA device; none is visible here")
    major, minor = torch.cuda.get_device_capability(device)
    return arch_for_capability(major, minor)


def load_cuda_source(
    source: str,
    entry: str,
    device: torch.device | int | None = None,
    *,
    cubin_dir: Path | None = None,
    timeout_s: float | None = None,
) -> CudaKernel:
    """Parse the header, compile (or hit the cubin cache in `cubin_dir`) for the device, load.
    `timeout_s`: nvcc's limit (None: NVCC_TIMEOUT_S)."""
    spec = parse_launch(source, entry)
    cubin = compile_cuda(
        source,
        current_arch(device),
        kernels=spec.kernels,
        cubin_dir=cubin_dir,
        timeout_s=NVCC_TIMEOUT_S if timeout_s is None else timeout_s,
    )
    return CudaKernel(cubin.data, spec, device)


def load_cubin(
    source: str,
    entry: str,
    cubin: bytes,
    arch: str | None,
    device: torch.device | int | None = None,
) -> CudaKernel:
    """A kernel from an already compiled cubin (a cache hit): no compiler is involved. `arch`
    is what it was built for; a different device arch raises ValueError."""
    here = current_arch(device)
    if arch is not None and arch != here:
        raise ValueError(f"the cubin was built for {arch}, this device is {here}: search again")
    return CudaKernel(cubin, parse_launch(source, entry), device)


def cubin_artifact_fields(
    source: str,
    entry: str,
    device: torch.device | int | None = None,
    cubin_dir: Path | None = None,
) -> dict[str, Any]:
    """What a cache artifact stores for a winning CUDA candidate: its cubin for this device
    (from the cubin cache the worker filled; compiled now if it is not there) and `launch`
    metadata: the parsed header, the arch, the compiler and its flags."""
    spec = parse_launch(source, entry)
    cubin = compile_cuda(source, current_arch(device), kernels=spec.kernels, cubin_dir=cubin_dir)
    launch = {"header": spec.to_dict(), "arch": cubin.arch, "compiler": cubin.compiler}
    return {"binary": cubin.data, "launch": launch | {"flags": list(cubin.flags)}}
