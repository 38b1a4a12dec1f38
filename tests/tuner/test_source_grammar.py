"""The grammar of free-form Triton sources from outside (tuner/source_grammar.py): every module
kernelpro renders fits it; every form Python evaluates when a module is imported or a kernel is
compiled, and every way to reach the host from a body, is refused with its reason."""

from __future__ import annotations

import collections

import pytest
from rendered import rendered_sources

from kernelpro_backend.tuner.admit import triton_source_problem

JIT_HEAD = "import triton\nimport triton.language as tl\n\n"  # what the old allow-list took
HEAD = JIT_HEAD + "import torch\n\n"
JIT = "@triton.jit\ndef kernel(x_ptr, n, BLOCK: tl.constexpr = 128):\n    tl.store(x_ptr, 1)\n\n"
HOST = (
    "def entry(in0, _launch=_direct):\n"
    "    out0 = torch.empty_strided([8], [1], dtype=torch.float32, device=in0.device)\n"
    "    _launch(kernel)[(triton.cdiv(8, 8),)](in0, out0, BLOCK=8, num_warps=1)\n"
    "    return [out0]\n"
)
GOOD = HEAD + "X = 4\n\n\ndef _direct(k):\n    return k\n\n\n" + JIT + HOST


def test_a_module_of_our_forms_is_admitted():
    assert triton_source_problem(GOOD, "entry") is None


@pytest.fixture(scope="module")
def ours():
    return rendered_sources()


def test_every_module_kernelpro_renders_is_admitted(ours):
    """All Triton template families, with their alternatives and knob variants; the CUTLASS
    module (C++ host code registered at import) and the padded GEMM's (library calls on
    padded copies) only through their specs, re-rendered here, never as free source."""
    families = collections.Counter()
    for source, (template, language, entry) in ours.items():
        if language != "triton":
            continue  # row_cluster: CUDA, loaded as a cubin
        problem = triton_source_problem(source, entry)
        if template in ("gemm_cutlass", "conv_cutlass"):
            assert problem and "CUTLASS module registers C++ host code" in problem
        elif template == "gemm_padded":  # torch calls beyond a launcher's: only via its spec
            assert problem and "import torch.nn.functional" in problem
        else:
            assert problem is None, f"{template}: {problem}\n{source}"
        families[template] += 1
    assert set(families) >= {
        "pointwise", "row_reduction", "gemm", "attention", "attention_backward",
        "gemm_library", "row_split", "gemm_cutlass", "gemm_padded", "conv", "conv_depthwise",
        "conv_backward",
    }, families  # fmt: skip
    assert sum(families.values()) > 1000


def _host(body: str, params: str = "in0") -> str:
    return HEAD + JIT + f"def entry({params}):\n" + "".join(f"    {x}\n" for x in body.split("\n"))


def _jit(body: str, params: str = "x_ptr") -> str:
    return (
        JIT_HEAD
        + "@triton.jit\ndef k("
        + params
        + "):\n"
        + "".join(f"    {x}\n" for x in body.split("\n"))
    )


DEFINITION_TIME = {
    # annotations: evaluated when the def runs, at import
    "star_args_annotation": (_jit("pass", "x, *rest: print('p')"), "*rest, annotated"),
    "kwargs_annotation": (_jit("pass", "x, **kw: print('p')"), "**kw, annotated"),
    "host_star_args_annotation": (_host("return [in0]", "in0, *rest: print('p')"), "*rest"),
    "param_annotation": (_jit("pass", "x: print('p')"), "annotates x"),
    "kwonly_annotation": (_jit("pass", "*, x: open('f')"), "annotates x"),
    "return_annotation": (
        HEAD + "def entry(x) -> print('p'):\n    return x\n",
        "return annotation",
    ),
    "module_annassign": (HEAD + "X: print('p') = 3\n", "AnnAssign at module level"),
    # defaults
    "default_call": (_jit("pass", "x=__import__('os').system('id')"), "not a literal"),
    "kwonly_default_call": (_host("return [in0]", "in0, *, y=open('f')"), "not a literal"),
    "default_walrus": (_host("return [in0]", "in0, y=(z := 3)"), "not a literal"),
    "default_lambda": (_host("return [in0]", "in0, y=lambda: 0"), "not a literal"),
    # decorators
    "decorator_call": (
        HEAD + "@triton.jit(do_not_specialize=[0])\ndef k(x):\n    pass\n",
        "decorated",
    ),
    "decorator_other": (HEAD + "@print\ndef entry(x):\n    return x\n", "decorated"),
    "decorator_lambda": (HEAD + "@(lambda f: f)\ndef entry(x):\n    return x\n", "decorated"),
    "decorator_stacked": (HEAD + "@triton.jit\n@triton.jit\ndef k(x):\n    pass\n", "decorated"),
    # walrus and lambdas elsewhere
    "walrus_in_body": (_jit("if (n := 3):\n    pass"), "NamedExpr"),
    "lambda_in_body": (_jit("f = lambda: 0"), "Lambda"),
    "lambda_constant": (HEAD + "F = lambda: __import__('os')\n", "not NAME = literal"),
    # module constants that are not literals
    "constant_call": (HEAD + "X = open('/etc/passwd')\n", "not NAME = literal"),
    "constant_constexpr_call": (HEAD + "X = tl.constexpr(3)\n", "not NAME = literal"),
    "constant_attribute": (HEAD + "X = torch.load\n", "not NAME = literal"),
    "module_expression": (HEAD + "print('hi')\n", "Expr at module level"),
    "module_if": (HEAD + "if True:\n    X = 1\n", "If at module level"),
    "module_try": (HEAD + "try:\n    X = 1\nexcept Exception:\n    pass\n", "Try at module level"),
    # class bodies and nested definitions
    "class_body": (HEAD + "class A:\n    x = print('p')\n", "ClassDef at module level"),
    "nested_def": (_jit("def inner(y=print('p')):\n    pass"), "FunctionDef is not a form"),
    "nested_decorated_def": (_jit("@print\ndef inner():\n    pass"), "FunctionDef"),
    "nested_class": (_jit("class A:\n    x = print('p')"), "ClassDef is not a form"),
    # scope and imports inside
    "global": (_jit("global X"), "Global"),
    "global_in_host": (_host("global X\nreturn [in0]"), "Global"),
    "import_inside": (_jit("import os"), "Import is not a form"),
    "import_module": (HEAD + "import subprocess\n", "imports"),
    "from_import": (HEAD + "from os import system\n", "imports from"),
    "import_alias": (HEAD + "import os as tl2\n", "imports"),
    "comprehension": (_jit("y = [print(i) for i in range(3)]"), "ListComp"),
    "with": (_host("with open('f') as f:\n    pass\nreturn [in0]"), "With"),
    # reaching the host from a body
    "os_system": (
        HEAD + "import os\n" + _host("os.system('id')\nreturn [in0]")[len(HEAD) :],
        "os.system",
    ),
    "torch_load": (_host("torch.load('f')\nreturn [in0]"), "torch.load"),
    "open_builtin": (_host("open('f', 'w')\nreturn [in0]"), "uses the name 'open'"),
    "getattr_builtin": (_host("getattr(in0, 'numpy')\nreturn [in0]"), "uses the name 'getattr'"),
    "tensor_numpy": (_host("in0.numpy().tofile('f')\nreturn [in0]"), "attribute 'tofile'"),
    "dunder_attribute": (_host("in0.__class__\nreturn [in0]"), "'__class__'"),
    "tl_submodule": (_jit("tl.core.builtins.exec('1')"), "tl.core.builtins.exec"),
    "tl_dunder": (_jit("tl.__dict__"), "tl.__dict__"),
    "jit_calls_os": (HEAD + "import os\n" + _jit("os.system('id')")[len(JIT_HEAD) :], "os.system"),
    "jit_calls_builtin": (_jit("exec('1')"), "uses the name 'exec'"),
    "jit_calls_host": (JIT_HEAD + "def h():\n    pass\n\n" + _jit("h()"), "uses the name 'h'"),
    "jit_star_args": (_jit("pass", "*xs"), "jit function"),
    "attribute_store": (_host("in0.data = in0\nreturn [in0]"), "assigns to an attribute"),
    "shadow_module": (_host("torch = 3\nreturn [in0]"), "binds 'torch'"),
    "dunder_name": (_host("__builtins__\nreturn [in0]"), "__builtins__"),
    "cutlass_register": (
        "from kernelpro_backend.ops.cutlass_gemm import register\nSOURCE = 'int x;'\n",
        "CUTLASS module",
    ),
    "cutlass_conv_register": (
        "from kernelpro_backend.ops.cutlass_conv import register\nSOURCE = 'int x;'\n",
        "CUTLASS module",
    ),
}


@pytest.mark.parametrize("case", sorted(DEFINITION_TIME))
def test_each_form_outside_the_grammar_is_refused_with_its_reason(case):
    source, reason = DEFINITION_TIME[case]
    compile(source, case, "exec")  # valid Python: refused by the grammar, not by the parser
    problem = triton_source_problem(source)
    assert problem is not None and reason in problem, problem


def test_the_entry_must_be_a_host_function_and_deep_sources_are_refused():
    assert "not a host function" in (triton_source_problem(GOOD, "kernel") or "")
    assert "not a host function" in (triton_source_problem(GOOD, "missing") or "")
    deep = HEAD + "X = " + "-" * 50_000 + "1\n"
    assert triton_source_problem(deep) is not None
    assert "over the limit" in (triton_source_problem("#" * 2_000_000) or "")
