"""Forward-path analysis shared by kernel-language plugins, from the AST alone: what ``ModelNew.forward``
and the functions it reaches may call. Allowed: allocation, views and shape queries; not allowed: PyTorch
compute, ``nn`` submodule calls, the reference ``Model``, dynamic dispatch. Each language adds its own
kernel predicate and checks (kz_triton.static, kz_cuda.static) and declares the namespaces its kernel API is
called through (`Language.kernel_namespaces`), which the forward-path rules leave alone."""

from __future__ import annotations

import ast
from collections.abc import Callable

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef  # a module function or ModelNew method, sync or async


def ast_walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk(node)``'s nodes, in its order, as a list kept on the node: one check walks the same parsed
    tree and its functions a few dozen times (most of its cost). Checks never change a tree they parse."""
    nodes = node.__dict__.get("_kz_walk")
    if nodes is None:
        nodes = node._kz_walk = list(ast.walk(node))  # type: ignore[attr-defined]
    return nodes


TORCH_ALLOWED = frozenset(
    """empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange
    device dtype Size float32 float16 bfloat16 float64 int32 int64 int8 uint8 bool is_tensor""".split()
)
METHOD_ALLOWED = frozenset(
    """view reshape contiguous permute transpose t size stride numel dim unsqueeze squeeze flatten expand
    new_empty new_zeros new_full empty_like data_ptr is_contiguous element_size item""".split()
)
# Tensor methods that hand a tensor's data to Python or NumPy (or run Python per element): in the forward path,
# host-side compute that no kernel did (the runtime guard records them too: guard.HOST_ESCAPES)
METHOD_HOST = frozenset(
    "numpy tolist apply_ map_ map2_ __array__ __dlpack__ to_dlpack untyped_storage storage _typed_storage".split()
)
# Tensor methods that compute; a call `x.<name>(...)` in the forward path is a violation.
METHOD_COMPUTE = frozenset(
    """abs add add_ addmm all amax amin any argmax argmin baddbmm bmm ceil clamp clamp_ clamp_min cos cumsum
    div div_ dot einsum eq exp exp_ expm1 floor gather ge gelu gt index_select le log
    log1p log_softmax logsumexp lt masked_fill matmul max maximum mean min minimum mm mul mul_ mv ne neg norm
    pow prod reciprocal relu relu_ round rsqrt scatter sigmoid sign sin softmax sort sqrt square std sub sub_
    sum tanh topk tril triu var where conv1d conv2d conv3d linear layer_norm batch_norm""".split()
)
TORCH_NAMES = ("torch", "F", "nn", "functional")
# Modules a kernel module has no business importing: other threads/processes escape the timer and the
# runtime guard; the harness's own modules and ctypes/gc let a candidate tamper with the evaluator.
# importlib/builtins/inspect reach any module or frame by a computed name, around every other rule here.
FORBIDDEN_IMPORTS = frozenset(
    "threading _thread concurrent multiprocessing subprocess ctypes gc kzcore importlib builtins inspect".split()
    + "pty posix _posixsubprocess socket _socket ssl".split()  # processes and raw network (sandbox.py)
    # attributes by a computed name (string.Formatter.get_field), source text the interpreter re-reads
    # (linecache), tensor bytes on the host by serialisation or raw buffers (io, pickle, mmap, array, struct)
    + "string linecache tokenize dis code codeop types weakref io pickle copyreg marshal shelve zipfile".split()
    + "tarfile mmap array struct tempfile imp".split()
    # the evaluator's frames (traceback, pdb, bdb, fault and trace hooks) and modules fetched by a string
    # (pkgutil.resolve_name, pydoc.locate, runpy, zipimport, unittest.mock.patch). Signal handlers are watched at
    # run time instead (integrity.process_handlers): the worker's own fault handling is tested through them
    + "faulthandler trace cgitb traceback pdb bdb pkgutil pydoc runpy zipimport unittest".split()
    # Python source strings run, or modules resolved by name, by the standard library's testing and profiling
    # helpers (`doctest._normalize_module`, `timeit.Timer(stmt, globals=...)`, `cProfile.runctx`)
    + "doctest timeit cProfile profile pstats".split()
    # strings evaluated as Python or resolved to objects by name: logging.config's "()" factories, YAML's python
    # tags, Jinja templates' attribute access, sympify, pickling libraries
    + "logging yaml jinja2 sympy mpmath cloudpickle dill joblib".split()
)
# Module names as attributes: another module's import of one (`some_module.np`, `some_module.traceback`) reaches
# it around the import rules, so an attribute of these names is refused off anything but the module itself
MODULE_ATTRS = frozenset(
    """np numpy sys os signal traceback inspect pdb bdb pkgutil pydoc runpy importlib gc ctypes threading _thread
    multiprocessing subprocess builtins faulthandler linecache weakref pickle marshal mmap logging unittest mock
    socket concurrent shutil yaml jinja2 sympy""".split()
)
# attribute paths into internals, custom operators (a Python implementation the op guard cannot see into),
# and tensor bytes on the host (serialisation, tensors over Python buffers)
FORBIDDEN_ATTRS = (
    "sys.modules", "torch._C", "_python_dispatch", "torch.ops", "torch.library", "torch.save", "torch.load",
    "torch.serialization", "torch.frombuffer", "torch.profiler", "torch.autograd.profiler", "torch.cuda.jiterator",
    # importers that load or fetch any module by a string (`torch.package.sys_importer.import_module("gc")`,
    # `torch.hub.load`), and torch's runners of Python source strings (`torch.utils.benchmark.Timer(stmt=...)`,
    # `torch.fx`'s code generation), around the import rules
    "torch.package", "torch.hub", "torch.utils.benchmark", "torch.fx",
)  # fmt: skip
# C++ built on the host at run time: a language whose kernels are built another way (Triton) has no use for it
HOST_BUILD_ATTRS = ("torch.utils.cpp_extension",)
# NumPy anywhere in a kernel module: allocation and dtypes only (its compute is host compute no kernel did)
NUMPY_ALLOWED = frozenset(
    "empty zeros ones full arange dtype float16 float32 float64 int32 int64 int8 uint8 bool_".split()
)
# What a Triton kernel module may import at all (roots), beside the deny list above: any other library can offer a
# runner of source strings or a resolver of modules by name under a name no deny list spells (the standard
# library's `doctest`, `timeit` and `cProfile` each did), while a kernel needs torch, Triton and a few plain-Python
# helpers
KERNEL_IMPORTS = frozenset(
    """torch triton math cmath numbers numpy typing typing_extensions functools itertools collections dataclasses
    enum abc operator os sys warnings __future__""".split()
)
# Dunder attributes a kernel module may read (`super().__init__()`, `fn.__name__`, `triton.__version__`): any other
# reaches an object's internals whatever object it is read off (`len.__self__` is the builtins module)
ALLOWED_DUNDER_ATTRS = frozenset("__init__ __name__ __qualname__ __doc__ __version__ __module__".split())
# Dunder names a module may use as names (`if __name__ == "__main__"`)
ALLOWED_DUNDER_NAMES = frozenset("__name__ __file__ __doc__".split())
# Dunder methods a kernel module's classes may define: Python runs any other at moments the module does not
# choose (`__del__` inside the reference's call, `__index__`/`__eq__`/`__hash__` when the evaluator reads a value,
# `__init_subclass__`/`__set_name__` at class creation, `__instancecheck__` in the evaluator's `isinstance`)
ALLOWED_DUNDER_METHODS = frozenset(
    "__init__ __repr__ __str__ __post_init__ __len__ __getitem__ __iter__ __next__ __call__ __enter__ __exit__".split()
)
# Anywhere in the module (module-level code runs in the evaluator's process too):
DYNAMIC_CALLS = frozenset("__import__ eval exec compile globals vars locals breakpoint".split())
# names that reach namespaces, frames and closures, fetch attributes by a computed name, or evaluate strings as
# annotations (typing.get_type_hints, singledispatch registering by annotation)
ESCAPE_NAMES = frozenset(
    """__dict__ __globals__ __builtins__ __code__ __closure__ __subclasses__ __bases__ __base__ __mro__
    __getattribute__ f_back f_globals f_locals f_builtins _getframe _current_frames currentframe walk_stack walk_tb
    tb_frame gi_frame cr_frame ag_frame attrgetter get_type_hints get_annotations ForwardRef _eval_type
    evaluate_forward_ref resolve_types singledispatch singledispatchmethod
    methodcaller __getattr__ __array_interface__ __array_struct__ ctypeslib to_dlpack from_dlpack dlpack""".split()
    # what a builtin or a method is bound to (`len.__self__` is the builtins module), the function under a wrapper,
    # and the import function as an attribute (`builtins_module.__import__`)
    + "__self__ __func__ __wrapped__ __import__".split()
    # a function's live default values (the evaluator's launch wrappers keep state in closures, not defaults) and
    # a frame's arguments and locals by another name
    + "__defaults__ __kwdefaults__ getargvalues getclosurevars getmembers getmembers_static".split()
    # a module fetched or loaded by a string, whatever library offers it (importlib's, torch.package's, a
    # finder's or a loader's own method)
    + """import_module sys_importer OrderedImporter find_spec find_module find_loader spec_from_file_location
    spec_from_loader module_from_spec exec_module load_module""".split()
    # a tensor's memory shared as a file or read and written by file descriptor, around every tensor method
    + """untyped_storage _typed_storage _share_fd_cpu_ _share_filename_cpu_ _share_cuda_ _new_shared
    _new_shared_fd_cpu _new_shared_filename_cpu _new_using_fd_cpu _new_using_filename_cpu pread pwrite preadv
    pwritev memfd_create""".split()
)
# hooks that run candidate code inside the evaluator's own calls (every call, line or opcode it makes)
HOOK_NAMES = frozenset("setprofile settrace setprofile_all_threads settrace_all_threads addaudithook".split())
# names that make tensors or torch calls behave differently (lazy outputs, rewritten reference ops)
OVERRIDE_NAMES = frozenset(
    """__torch_function__ __torch_dispatch__ TorchFunctionMode TorchDispatchMode overrides as_subclass
    _make_subclass _make_wrapper_subclass""".split()
)
STREAM_NAMES = frozenset("Stream ExternalStream StreamContext set_stream".split())
REFLECTION_CALLS = frozenset("getattr hasattr setattr delattr".split())
# os functions that start or replace a process, or signal another one (the worker refuses them at run time too)
PROCESS_NAMES = frozenset(
    """fork forkpty posix_spawn posix_spawnp execv execve execl execle execlp execlpe execvp execvpe spawnv spawnve
    spawnvp spawnvpe spawnl spawnle spawnlp spawnlpe killpg getppid pidfd_open""".split()
)


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class ModuleInfo:
    """What a candidate module defines, and which of its functions are kernels (``is_kernel``)."""

    def __init__(self, tree: ast.Module, is_kernel: Callable[[FunctionNode], bool] = lambda fn: False):
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.kernels = {name for name, fn in self.functions.items() if is_kernel(fn)}
        self.model_new = self.classes.get("ModelNew")
        self.methods = (
            {n.name: n for n in self.model_new.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if self.model_new
            else {}
        )
        self.submodules = self._submodule_attrs()

    def _submodule_attrs(self) -> dict[str, str]:
        """self.<attr> = nn.<Module>(...) assignments in ModelNew.__init__."""
        init = self.methods.get("__init__")
        out = {}
        for node in ast_walk(init) if init else ():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                ctor = dotted(node.value.func)
                if ctor.startswith(("nn.", "torch.nn.")) and ctor.split(".")[-1] not in ("Parameter", "ParameterList"):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and dotted(t.value) == "self":
                            out[t.attr] = ctor
        return out

    def forward_path(self) -> list[FunctionNode]:
        """forward plus the module functions and ModelNew methods reachable from it (kernels excluded)."""
        start = self.methods.get("forward")
        if start is None:
            return []
        seen, stack, path = set(), [start], []
        while stack:
            fn = stack.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            path.append(fn)
            for node in ast_walk(fn):
                # any reference counts, not only calls: Thread(target=helper) or map(helper, ...) run it too
                name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""
                if name in self.functions and name not in self.kernels:
                    stack.append(self.functions[name])
                elif name.startswith("self.") and name[5:] in self.methods:
                    stack.append(self.methods[name[5:]])
        return path


def exempt_namespaces() -> tuple[str, ...]:
    """Names whose calls are never tensor methods, whatever they are called (``math.exp``, ``tl.sum``):
    Python's ``math`` and the kernel namespaces of every registered language (`Language.kernel_namespaces`).
    A name starting with one is exempt."""
    from kzcore.language import kernel_namespaces
    from kzcore.plugins import languages

    return (*kernel_namespaces(languages().items.values()), "math")


def violations_in(fn: FunctionNode, mod: ModuleInfo, exempt: tuple[str, ...]) -> list[str]:
    """PyTorch compute, submodule calls, the reference Model and dynamic dispatch inside ``fn``; a tensor
    method's name called through a name starting with one of ``exempt`` (`exempt_namespaces`) is not one."""
    out = []
    for node in ast_walk(fn):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(f"line {line}: `@` (matrix multiply) on tensors in the forward path")
        if not isinstance(node, ast.Call):
            if isinstance(node, ast.Name) and node.id == "Model":
                out.append(f"line {line}: uses the reference `Model` class")
            continue
        name = dotted(node.func)
        head, _, last = name.rpartition(".")
        if head and head.split(".")[0] in TORCH_NAMES and name.split(".")[0] in TORCH_NAMES:
            if head.split(".")[0] == "torch" and "." not in head and last in TORCH_ALLOWED:
                continue
            if head in ("torch.cuda",) or head.startswith("torch.cuda."):
                continue
            out.append(f"line {line}: calls `{name}` (PyTorch compute) in the forward path")
        elif name.startswith("self.") and name[5:] in mod.submodules:
            out.append(f"line {line}: calls submodule `{name}` ({mod.submodules[name[5:]]}) instead of a kernel")
        elif head and last in METHOD_COMPUTE and not head.startswith(exempt):
            out.append(f"line {line}: calls tensor method `.{last}()` (PyTorch compute) in the forward path")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in METHOD_HOST:
            out.append(f"line {line}: `.{node.func.attr}()` takes tensor data to Python or NumPy in the forward path")
        elif name in ("getattr", "eval", "exec", "__import__", "compile"):
            out.append(f"line {line}: calls `{name}` in the forward path (dynamic dispatch is not allowed)")
    return list(dict.fromkeys(out))


def forward_violations(mod: ModuleInfo) -> list[str]:
    """Violations in the whole forward path, each reported once."""
    out: list[str] = []
    exempt = exempt_namespaces()
    for fn in mod.forward_path():
        out += [v for v in violations_in(fn, mod, exempt) if v not in out]
    return out


def common_violations(
    tree: ast.Module,
    forbidden_imports: frozenset[str] = FORBIDDEN_IMPORTS,
    allowed_imports: frozenset[str] | None = None,
) -> list[str]:
    """try/except fallbacks, forbidden imports (with ``allowed_imports``, also every import whose root it does not
    list), attribute paths into PyTorch or Python internals, and the ways around those rules
    (``escape_violations``)."""
    problems: list[str] = []
    internals: dict[int, str] = {}
    aliases = module_aliases(tree)
    for node in ast_walk(tree):
        if isinstance(node, ast.Try):
            problems.append(f"line {node.lineno}: try/except is not allowed (no fallback paths)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                root = name.split(".")[0]
                if root in forbidden_imports:
                    problems.append(f"line {node.lineno}: importing `{name}` is not allowed in a kernel module")
                elif root.startswith("_") and root != "__future__":  # a C twin of a module the list bans (`_weakref`)
                    problems.append(f"line {node.lineno}: importing `{name}`, a private module, is not allowed")
                elif allowed_imports is not None and root not in allowed_imports:
                    shown = ", ".join(sorted(allowed_imports - {"__future__"}))
                    problems.append(
                        f"line {node.lineno}: importing `{name}` is not allowed in a kernel module (only {shown})"
                    )
            # the import forms of the attribute paths below: `from torch import _C`, `from sys import modules`
            full = names if isinstance(node, ast.Import) else [f"{node.module}.{a.name}" for a in node.names]
            for path in full:
                if any(bad in path for bad in FORBIDDEN_ATTRS + HOST_BUILD_ATTRS) or _private_torch(path):
                    internals.setdefault(node.lineno, path)
        elif isinstance(node, ast.Attribute) and (
            any(bad in (path := canonical(dotted(node), aliases)) for bad in FORBIDDEN_ATTRS + HOST_BUILD_ATTRS)
            or _private_torch(path)
        ):  # a private part of torch by attribute path too (`torch.utils._mode_utils.no_dispatch`)
            internals.setdefault(node.lineno, path)  # ast.walk meets the outermost attribute first
    return (
        problems
        + [f"line {line}: `{name}` reaches into PyTorch or Python internals" for line, name in internals.items()]
        + escape_violations(tree)
        + numpy_violations(tree)
    )


def module_aliases(tree: ast.Module) -> dict[str, str]:
    """Each name the module binds to a module or to an attribute path from one, with the full path it stands
    for: ``import sys as s`` gives ``s`` = ``sys``, ``from torch import package as p`` gives ``p`` =
    ``torch.package``, and ``m = s`` or ``h = p.sys_importer`` follow them (anywhere in the module, until
    nothing new is found). The attribute rules read paths through them (`canonical`), so an alias spells the
    path it stands for."""
    found: dict[str, str] = {}
    for node in ast_walk(tree):
        if isinstance(node, ast.Import):
            found.update({a.asname: a.name for a in node.names if a.asname and a.asname != a.name})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if a.name != "*"})
    assigns = [
        n for n in ast_walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Name, ast.Attribute))
    ]
    changed, rounds = True, 0
    while changed and rounds <= len(assigns):  # bounded: `x = x.y` would otherwise grow the path for ever
        changed, rounds = False, rounds + 1
        for node in assigns:
            path = dotted(node.value)
            if not path or path.split(".")[0] not in found:
                continue
            full = canonical(path, found)
            for target in node.targets:
                if isinstance(target, ast.Name) and found.get(target.id) != full and target.id != full:
                    found[target.id] = full
                    changed = True
    return found


def canonical(path: str, aliases: dict[str, str]) -> str:
    """``path`` with its first name replaced by the path that name stands for (`module_aliases`)."""
    head, dot, rest = path.partition(".")
    return aliases[head] + dot + rest if head in aliases else path


def numpy_violations(tree: ast.Module) -> list[str]:
    """NumPy names other than allocation and dtypes (`NUMPY_ALLOWED`), anywhere in the module: NumPy computing
    on tensor memory (``torch.from_numpy`` over an array, an ``__array_interface__``) is host compute that no
    kernel did and no operator records, and it can sit in any helper the forward reaches."""
    aliases = {a.asname or a.name for n in ast_walk(tree) if isinstance(n, ast.Import) for a in n.names
               if a.name.split(".")[0] == "numpy"}  # fmt: skip
    out = []
    for node in ast_walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy":
            names = [a.name for a in node.names if (node.module or "") != "numpy" or a.name not in NUMPY_ALLOWED]
            if names:
                out.append(
                    f"line {node.lineno}: `from {node.module} import {', '.join(names)}`: NumPy may only allocate"
                )
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr not in NUMPY_ALLOWED:
                out.append(
                    f"line {node.lineno}: `{node.value.id}.{node.attr}`: NumPy may only allocate in a kernel module"
                )
    return list(dict.fromkeys(out))


def _private_torch(path: str) -> bool:
    """``torch._dynamo``, ``torch.utils._python_dispatch``: a private part of torch (a kernel module needs none)."""
    parts = path.split(".")
    return parts[0] == "torch" and any(part.startswith("_") and not _dunder(part) for part in parts[1:])


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast_walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def _name_problem(name: str, line: int | str, path: str) -> str | None:
    if name in PROCESS_NAMES or (name in ("system", "popen") and path.split(".")[0] == "os"):
        return f"line {line}: `{path}`: candidate code may not start or signal other processes"
    if name in ESCAPE_NAMES:
        return f"line {line}: `{path}` reaches into Python internals (namespaces, frames, computed attributes)"
    if name in HOOK_NAMES:
        return f"line {line}: `{path}` would run candidate code inside the evaluator's own calls"
    if name in OVERRIDE_NAMES:
        return f"line {line}: `{path}`: tensor subclasses, torch modes and `__torch_function__` are not allowed"
    if name in STREAM_NAMES or path.endswith("cuda.stream"):
        return f"line {line}: `{path}`: side CUDA streams are not allowed (work must run on the current stream)"
    if name == "suppress":
        return f"line {line}: `{path}` swallows errors like try/except (no fallback paths)"
    return None


def _module_values(tree: ast.Module) -> set[str]:
    """Names the module's top level binds to values it did not define there (a call's result, another name, an
    attribute, a loop variable): an attribute set on one of them is set on an object from elsewhere (a module a
    helper fetched, `_t = doctest._normalize_module(...)`), unlike one set on a class or function of its own."""
    names: set[str] = set()
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Name):
                    names.add(t.id)
    own = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    return names - own


def _layer_package(node: ast.Attribute, aliases: dict[str, str]) -> bool:
    """``torch.nn.modules`` (torch's package of layer classes, through any alias of ``torch`` or ``nn``) or
    ``self.modules`` (`nn.Module.modules`, a method): the attributes named ``modules`` that are not the module table."""
    path = canonical(dotted(node), aliases)
    return path in ("torch.nn.modules", "self.modules") or (dotted(node) == "nn.modules" and "nn" not in aliases)


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _patch_target(node: ast.AST, imported: set[str]) -> str:
    """``torch.cuda.synchronize`` for an assignment target rooted at an imported name, else ""."""
    while isinstance(node, ast.Subscript):
        node = node.value
    path = dotted(node) if isinstance(node, ast.Attribute) else ""
    return path if path.split(".")[0] in imported else ""


def _aliases(tree: ast.Module, imported: set[str]) -> set[str]:
    """Names bound to an imported name or to an attribute path from one (``lang = tl``, ``lin = torch.linalg``),
    anywhere in the module: patching through them is patching the module itself."""
    found: set[str] = set()
    for node in ast_walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            if dotted(node.value).split(".")[0] in imported | found:
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


def _plain_attribute_name(node: ast.AST) -> bool:
    """A literal attribute name, or an f-string that starts with literal text, not starting with "_"."""
    if isinstance(node, ast.JoinedStr):
        node = node.values[0] if node.values else node
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and not node.value.startswith("_")


def escape_violations(tree: ast.Module) -> list[str]:
    """Ways around the other rules, anywhere in the module: dynamic code (``eval``, ``__import__``,
    computed ``getattr``), namespace/frame access, monkey-patching imported modules (timers, ``synchronize``,
    ``torch.allclose``; through an alias too), tensor subclasses and torch modes, side streams,
    ``contextlib.suppress``, ``super(C, x)`` naming anything but a class of this module (around a wrapped
    method), ``setattr`` on ``self`` with a computed or private name."""
    imported = _imported_names(tree)
    imported |= _aliases(tree, imported)
    aliases = module_aliases(tree)
    fetched = _module_values(tree) - imported
    called = {id(node.func) for node in ast_walk(tree) if isinstance(node, ast.Call)}
    # `x.numpy()` is a tensor method (the forward-path rules judge it); `m.numpy.f` reaches the module
    inner = {id(node.value) for node in ast_walk(tree) if isinstance(node, ast.Attribute)}
    own_classes = {node.name for node in ast_walk(tree) if isinstance(node, ast.ClassDef)}
    out: list[str] = []

    def add(problem: str | None) -> None:
        if problem and problem not in out:
            out.append(problem)

    for node in ast_walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn, args = node.func.id, node.args
            if fn in DYNAMIC_CALLS:
                add(f"line {line}: calls `{fn}` (dynamic code and namespace access are not allowed)")
            elif fn in ("getattr", "hasattr") and len(args) > 1:
                name = args[1].value if isinstance(args[1], ast.Constant) else None
                if not isinstance(name, str) or name.startswith("_") or name == "modules":
                    add(f"line {line}: `{fn}` with a computed or private attribute name is not allowed")
                else:
                    add(_name_problem(name, line, f"{dotted(args[0]) or '?'}.{name}"))
            elif fn in ("setattr", "delattr") and args and dotted(args[0]).split(".")[0] != "self":
                add(f"line {line}: `{fn}` on `{dotted(args[0]) or 'an object'}` (monkey-patching is not allowed)")
            elif fn in ("setattr", "delattr") and len(args) > 1 and not _plain_attribute_name(args[1]):
                add(f"line {line}: `{fn}` with a computed or private attribute name is not allowed")
            elif fn == "super" and args and not (isinstance(args[0], ast.Name) and args[0].id in own_classes):
                add(f"line {line}: `super({dotted(args[0]) or '…'}, …)` names no class of this module")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for t in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                    if path := _patch_target(t, imported):
                        add(f"line {line}: assigns to `{path}` (monkey-patching is not allowed)")
                    elif path := _patch_target(t, fetched):
                        add(
                            f"line {line}: assigns to `{path}`, an attribute of an object the module did not define "
                            "(monkey-patching is not allowed)"
                        )
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if dotted(base).split(".")[-1] in ("Tensor", "Parameter") or dotted(base).endswith("Mode"):
                    add(f"line {line}: class `{node.name}` subclasses `{dotted(base)}` (no tensor subclasses or modes)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(_name_problem(node.name, line, node.name))
            if _dunder(node.name) and node.name not in ALLOWED_DUNDER_METHODS:
                add(f"line {line}: defines `{node.name}`, which Python runs at moments the module does not choose")
        elif isinstance(node, ast.Attribute):
            add(_name_problem(node.attr, line, dotted(node) or f".{node.attr}"))
            if _dunder(node.attr) and node.attr not in ALLOWED_DUNDER_ATTRS | ESCAPE_NAMES | OVERRIDE_NAMES:
                add(f"line {line}: `{dotted(node) or '.' + node.attr}` reaches into Python internals (a dunder)")
            if node.attr == "modules" and id(node) not in called and not _layer_package(node, aliases):
                add(f"line {line}: `{dotted(node) or '….modules'}` not called: the interpreter's module table")
            own = isinstance(node.value, ast.Name) and node.value.id == node.attr
            if node.attr in MODULE_ATTRS and not own and (node.attr != "numpy" or id(node) in inner):
                add(f"line {line}: `{dotted(node) or '.' + node.attr}` reaches a module through another one")
        elif isinstance(node, ast.Name):
            add(_name_problem(node.id, line, node.id))
            if _dunder(node.id) and node.id not in ALLOWED_DUNDER_NAMES | ESCAPE_NAMES | DYNAMIC_CALLS | OVERRIDE_NAMES:
                add(f"line {line}: `{node.id}` reaches into Python internals (a dunder)")
            if node.id in DYNAMIC_CALLS | REFLECTION_CALLS and id(node) not in called:
                add(f"line {line}: `{node.id}` passed around as a value (dynamic access is not allowed)")
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                add(_name_problem(a.name, line, f"{node.module}.{a.name}"))
                if a.name in MODULE_ATTRS and node.module:
                    add(f"line {line}: `from {node.module} import {a.name}` reaches a module through another one")
            for part in (node.module or "").split("."):
                add(_name_problem(part, line, node.module or ""))  # None: `from . import x`
        elif isinstance(node, ast.Import):
            for a in node.names:
                for part in a.name.split("."):
                    add(_name_problem(part, line, a.name))
    return out
