"""The grammar a free-form Triton source from outside must fit: the forms kernelpro emits.

A free-form source (an LLM's kernel shipped in a bundle, say) is Python: importing it runs its
module body, Triton evaluates a @triton.jit function's defaults and annotations at definition
and calls any Python callable a kernel body names at compile time. So instead of denying known
places, this admits only a module made of exactly what codegen/render.py writes:
- imports of triton, triton.language as tl, torch, math and os (os only for the INTERPRET line);
- `INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"` and names bound to literals;
- `@triton.jit` functions (the decorator exactly the attribute `triton.jit`): parameters with
  no default or a literal one, no annotation but `tl.constexpr`, no `*args` / `**kwargs`;
  bodies of assignments, if/for/while, returns, operators, calls and subscripts whose names are
  the function's own, the module's constants and jit functions, `range`-like builtins and
  public `tl.*` / `math.*` names (never a submodule of triton.language: `tl.core.builtins`
  would reach `exec`);
- undecorated host functions (the launcher `entry`): the same statements plus `raise` and
  f-strings, parameters without annotations (an unannotated `*args` is ours), defaults that are
  literals or the module's functions, and only the torch / triton attributes our launchers use
  (`torch.empty_strided`, `triton.cdiv`, a tensor's `.stride()`...).
No lambda, class, walrus, comprehension, nested def, global/nonlocal, import in a function,
`with`/`try`, attribute assignment, or name or attribute starting with an underscore (but
`torch._addmm_activation`, which our cuBLASLt launcher calls). A CUTLASS module is refused: it
registers C++ host code, which only its spec (re-rendered here) may produce.

Owns: `source_problem(source, entry) -> reason | None` and the tables above.
Must not: import, compile or run the source.
"""

from __future__ import annotations

import ast
import builtins

_CUTLASS_CONV = "kernelpro_backend.ops.cutlass_conv"
MAX_SOURCE_CHARS = 1_000_000  # our largest rendered Triton module is under 40 KB
_INTERPRET = ast.dump(ast.parse('INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"').body[0])
_IMPORTS = {"triton": None, "triton.language": "tl", "math": None, "torch": None, "os": None}
_MODULES = {"triton", "tl", "math", "torch", "os"}
_TL_MODULES = {"core", "extra", "random", "standard", "target_info", "semantic", "math"}
JIT_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "abs"}
HOST_BUILTINS = JIT_BUILTINS | {"tuple", "list", "isinstance", "ValueError", "RuntimeError"}
HOST_CHAINS = {
    *(f"torch.{n}" for n in ("empty_strided", "empty", "zeros", "empty_like", "zeros_like")),
    *(f"torch.{n}" for n in ("float32", "float16", "bfloat16", "float64", "int8", "int16")),
    *(f"torch.{n}" for n in ("int32", "int64", "uint8", "bool", "device", "_addmm_activation")),
    "torch.cuda.get_device_properties",
    "torch.cuda.get_device_capability",
    "triton.cdiv",
    "triton.next_power_of_2",
    "triton.set_allocator",
}
# Attributes a launcher reads of its tensors, devices and device properties.
HOST_VALUE_ATTRS = {
    "device", "type", "index", "dtype", "shape", "stride", "size", "numel", "storage_offset",
    "as_strided", "data_ptr", "copy_", "contiguous", "is_contiguous", "view", "reshape", "t",
    "element_size", "new_empty", "multi_processor_count", "major", "minor", "zero_", "fill_",
}  # fmt: skip
_BODY = (
    ast.Assign, ast.AugAssign, ast.Expr, ast.Return, ast.If, ast.For, ast.While, ast.Pass,
    ast.Break, ast.Continue, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call,
    ast.keyword, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List,
    ast.Constant, ast.IfExp, ast.Starred, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
    ast.expr_context,
)  # fmt: skip
_HOST_BODY = (*_BODY, ast.Raise, ast.JoinedStr, ast.FormattedValue)


class _Refused(Exception):
    pass


def source_problem(source: str, entry: str | None = None) -> str | None:
    """None when `source` fits the grammar (and `entry`, if given, names one of its host
    functions); else the first thing that does not, with its line."""
    if len(source) > MAX_SOURCE_CHARS:
        return f"{len(source)} characters, over the limit of {MAX_SOURCE_CHARS}"
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return f"does not parse: {e.msg} (line {e.lineno})"
    except (RecursionError, MemoryError, ValueError) as e:
        return f"does not parse ({type(e).__name__})"
    try:
        module = _Module(tree)
        for node in tree.body:
            module.statement(node)
    except _Refused as e:
        return str(e)
    except RecursionError:
        return "nested too deeply for a kernel"
    if entry is not None and entry not in module.host:
        return f"its entry {entry!r:.60} is not a host function of the module"
    return None


def _refuse(node: ast.AST, why: str) -> _Refused:
    return _Refused(f"line {getattr(node, 'lineno', '?')}: {why}")


def _literal(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    return isinstance(node, ast.Tuple) and all(_literal(e) for e in node.elts)


def _chain(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


class _Module:
    """The module's top-level names, filled statement by statement (a name must be defined
    before a default names it)."""

    def __init__(self, tree: ast.Module) -> None:
        self.constants: set[str] = set()
        self.jit: set[str] = set()
        self.host: set[str] = set()
        self.reserved = _MODULES | set(dir(builtins))
        # Functions may call functions defined after them: collect the names first.
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                (self.jit if _is_jit(node) else self.host).add(node.name)

    def bind(self, node: ast.AST, name: str) -> None:
        if name in self.reserved or name in self.constants:
            raise _refuse(node, f"binds {name!r}, a name that is already taken")
        if name.startswith("__"):
            raise _refuse(node, f"binds the dunder name {name!r}")

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in _IMPORTS or alias.asname not in (None, _IMPORTS[alias.name]):
                    raise _refuse(node, f"imports {ast.unparse(node)!r:.80} (only triton, "
                                  "triton.language as tl, torch, math, os)")  # fmt: skip
        elif isinstance(node, ast.ImportFrom):
            if node.module in ("kernelpro_backend.ops.cutlass_gemm", _CUTLASS_CONV):
                raise _refuse(node, "a CUTLASS module registers C++ host code; it is admitted "
                              "only as a spec-built entry, re-rendered here")  # fmt: skip
            raise _refuse(node, f"imports from {node.module!r:.60} (only `import` of triton, "
                          "triton.language as tl, torch, math, os)")  # fmt: skip
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            pass  # a docstring
        elif isinstance(node, ast.Assign) and ast.dump(node) == _INTERPRET:
            self.constants.add("INTERPRET")
        elif isinstance(node, ast.Assign):
            target = node.targets[0] if len(node.targets) == 1 else None
            if not isinstance(target, ast.Name) or not _literal(node.value):
                raise _refuse(node, "a module-level assignment that is not NAME = literal")
            self.bind(node, target.id)
            self.constants.add(target.id)
        elif isinstance(node, ast.FunctionDef):
            if node.name in self.reserved or node.name.startswith("__"):
                raise _refuse(node, f"defines a function named {node.name!r}")
            _Function(node, self).check()
        else:
            raise _refuse(node, f"{type(node).__name__} at module level (only imports, "
                          "NAME = literal and functions)")  # fmt: skip


def _is_jit(node: ast.FunctionDef) -> bool:
    return [ast.dump(d) for d in node.decorator_list] == [
        ast.dump(ast.parse("triton.jit", mode="eval").body)
    ]


class _Function:
    """One function: its signature, then every node of its body against the tables."""

    def __init__(self, node: ast.FunctionDef, module: _Module) -> None:
        self.node, self.module = node, module
        self.jit = _is_jit(node)
        self.name = node.name
        args = node.args
        self.params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        self.locals = {a.arg for a in self.params}
        self.locals |= {v.arg for v in (args.vararg, args.kwarg) if v is not None}

    def fail(self, node: ast.AST, why: str) -> _Refused:
        return _refuse(node, f"function {self.name}: {why}")

    def check(self) -> None:
        node, args = self.node, self.node.args
        if node.decorator_list and not self.jit:
            raise self.fail(node, "decorated with something other than exactly @triton.jit")
        if node.returns is not None or getattr(node, "type_params", None):
            raise self.fail(node, "a return annotation or type parameters")
        for stars, var in (("*", args.vararg), ("**", args.kwarg)):
            if var is not None and (self.jit or var.annotation is not None):
                where = "annotated" if var.annotation is not None else "in a @triton.jit function"
                raise self.fail(node, f"{stars}{var.arg}, {where}")
        for p in self.params:
            wanted = ("tl.constexpr", "triton.language.constexpr") if self.jit else ()
            if p.annotation is not None and ast.unparse(p.annotation) not in wanted:
                raise self.fail(node, f"annotates {p.arg} with {ast.unparse(p.annotation)!r:.60}")
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            named = isinstance(default, ast.Name) and default.id in self.module.host
            if not (_literal(default) or (named and not self.jit)):
                raise self.fail(
                    node, f"a default that is not a literal: {ast.unparse(default)!r:.60}"
                )
        bound: list[tuple[ast.AST, str]] = [(p, p.arg) for p in self.params]
        bound += [(n, n.id) for n in ast.walk(node) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)]  # fmt: skip
        for site, name in bound:
            if name in self.module.reserved or name.startswith("__"):
                raise self.fail(site, f"binds {name!r}, the name of a module or builtin")
            self.locals.add(name)
        for stmt in node.body:
            self.visit(stmt)

    def visit(self, node: ast.AST) -> None:
        allowed = _BODY if self.jit else _HOST_BODY
        if not isinstance(node, allowed):
            raise self.fail(node, f"{type(node).__name__} is not a form kernelpro emits")
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Name):
            return self.load_name(node)
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def load_name(self, node: ast.Name) -> None:
        m, name = self.module, node.id
        ok = (
            name in self.locals
            or name in m.constants
            or name in m.jit
            or (not self.jit and name in m.host)
            or name in (JIT_BUILTINS if self.jit else HOST_BUILTINS)
        )
        if not ok:
            raise self.fail(node, f"uses the name {name!r:.60}")

    def attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load):
            raise self.fail(node, f"assigns to an attribute ({ast.unparse(node)!r:.60})")
        chain = _chain(node)
        if chain is not None and chain[0] in _MODULES and chain[0] not in self.locals:
            if not self.module_chain(chain):
                raise self.fail(node, f"uses {'.'.join(chain)!r:.80}")
            return
        if node.attr.startswith("_") or (not self.jit and node.attr not in HOST_VALUE_ATTRS):
            raise self.fail(node, f"reads the attribute {node.attr!r:.60}")
        self.visit(node.value)

    def module_chain(self, chain: list[str]) -> bool:
        if chain[:2] == ["triton", "language"]:
            chain = ["tl", *chain[2:]]
        if any(part.startswith("_") for part in chain[1:]):
            return not self.jit and ".".join(chain) in HOST_CHAINS
        if chain[0] == "tl":
            inner = chain[2:] if chain[1:2] == ["math"] else chain[1:]
            return 1 <= len(inner) <= 2 and inner[0] not in _TL_MODULES
        if chain[0] == "math":
            return len(chain) == 2
        return not self.jit and ".".join(chain) in HOST_CHAINS
