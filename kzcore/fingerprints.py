"""A problem's fingerprint for decontamination (kzcore/decontam.py, whose module doc states the rule in full):
its normalised tokens (`normalized_tokens`, step 1 of the rule) and the set of torch ops it computes with
(`torch_ops`, step 3), and the similarity of two token lists (`similarity`, step 2). The rule that reads them,
the reports and the training sources are decontam.py's."""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import io
import keyword
import tokenize
from collections.abc import Sequence

import attrs

from kzcore.errors import KzError
from kzcore.proposer.names import import_aliases, qualified_name
from kzcore.types import Problem

ID, NUM, STR = "ID", "NUM", "STR"
_INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}
_LAYOUT |= {tokenize.ENCODING, tokenize.ENDMARKER}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python >= 3.12 cuts f-strings into parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
# an operator is the op it calls: ``a @ b`` is ``matmul`` like ``torch.matmul(a, b)``
_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordivide",
    ast.Mod: "remainder", ast.Pow: "pow", ast.MatMult: "matmul",
}  # fmt: skip


class DecontamError(KzError):
    """A source that is not valid Python, or a training source that cannot be read (one line for the user)."""


def label(problem: Problem) -> str:
    """A problem's name in reports: ``suite:levelN/name`` (``levelN/name`` without a suite)."""
    return f"{problem.suite}:{problem.key}" if problem.suite else problem.key


@functools.cache
def _library_attrs() -> frozenset[str]:
    """Attribute names that are torch API (tensor methods, nn.Module members): kept by name in the tokens."""
    import torch

    return frozenset(dir(torch.Tensor)) | frozenset(dir(torch.nn.Module))


@functools.cache
def _tensor_methods() -> frozenset[str]:
    import torch

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("_"))


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → dotted path, for the names the module's imports bind under ``torch``."""
    return {name: path for name, path in import_aliases(tree).items() if path.split(".")[0] == "torch"}


def _canonical(path: str) -> str:
    """One spelling per torch name: ``torch.nn.functional.relu`` → ``F.relu``, ``torch.nn.Linear`` → ``nn.Linear``."""
    for long, short in (("torch.nn.functional.", "F."), ("torch.nn.", "nn.")):
        if path.startswith(long):
            return short + path[len(long) :]
    return path


class _Strip(ast.NodeTransformer):
    """Removes docstrings (any statement that is a bare string), imports and annotations."""

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_FunctionDef(self, node):
        node.returns = None
        if node.name in _INPUT_FUNCTIONS:
            _inline_temporaries(node)
        self.generic_visit(node)
        if not node.body:
            node.body = [ast.Pass()]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        if not node.body:
            node.body = [ast.Pass()]
        return node

    def visit_Call(self, node):
        # super(Model, self).__init__() is super().__init__() in a method: one spelling
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args, node.keywords = [], []
        return self.generic_visit(node)

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return self.generic_visit(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno))


def _is_sizes_table(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KZ_SIZES" for t in node.targets)


class _Replace(ast.NodeTransformer):
    """Puts ``value`` where the Name node ``target`` is."""

    def __init__(self, target: ast.Name, value: ast.expr):
        self.target, self.value = target, value

    def visit_Name(self, node):
        return self.value if node is self.target else node


def _inline_temporaries(func: ast.FunctionDef) -> None:
    """In an input generator, ``x = torch.rand(n); return [x]`` becomes ``return [torch.rand(n)]``: a local
    assigned once and read once is written where it is read (the suites differ in this style only)."""
    changed = True
    while changed:
        changed = False
        for index, stmt in enumerate(func.body):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            rest = func.body[index + 1 :]
            uses = [n for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and n.id == name]
            if len(uses) != 1 or not isinstance(uses[0].ctx, ast.Load):
                continue
            put = _Replace(uses[0], stmt.value)
            func.body = func.body[:index] + [put.visit(s) for s in rest]
            changed = True
            break


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise DecontamError(f"{where}: not valid Python (line {exc.lineno}: {exc.msg})") from None


def normalized_tokens(source: str, where: str = "source") -> tuple[str, ...]:
    """The token list the similarity compares (kzcore.decontam's module doc, step 1)."""
    tree = _parse(source, where)
    aliases = _aliases(tree)
    aliases.setdefault("torch", "torch")
    body = [node for node in tree.body if not _is_sizes_table(node)]
    assigns = [n for n in body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    tree.body = assigns + [n for n in body if not isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    tree = ast.fix_missing_locations(_Strip().visit(tree))
    text = ast.unparse(tree)
    raw = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _LAYOUT]
    keep = _library_attrs()
    out: list[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        after_dot = i > 0 and raw[i - 1].type == tokenize.OP and raw[i - 1].string == "."
        if tok.type == _FSTRING_START:
            depth = 0
            while i < len(raw):
                depth += (raw[i].type == _FSTRING_START) - (raw[i].type == _FSTRING_END)
                i += 1
                if depth == 0:
                    break
            out.append(STR)
            continue
        if tok.type == tokenize.NAME:
            name = tok.string
            if after_dot:
                out.append(name if name in keep else ID)
            elif keyword.iskeyword(name):
                out.append(name)
            elif name in aliases:
                path = aliases[name]
                while i + 2 < len(raw) and raw[i + 1].string == "." and raw[i + 2].type == tokenize.NAME:
                    path += "." + raw[i + 2].string
                    i += 2
                out.append(_canonical(path))
            elif hasattr(builtins, name) and i + 1 < len(raw) and raw[i + 1].string == "(":
                out.append(name)  # a builtin called (super, range, len); a variable named `input` is an ID
            else:
                out.append(ID)
        elif tok.type == tokenize.NUMBER:
            out.append(NUM)
        elif tok.type == tokenize.STRING:
            out.append(STR)
        else:
            out.append(tok.string)
        i += 1
    return tuple(out)


def op_name(spelling: str) -> str:
    """One name per op, whatever the spelling: the last dotted part, lower case, without underscores and
    without a ``Loss`` suffix. ``torch.relu``, ``F.relu``, ``nn.ReLU`` and ``x.relu()`` are ``relu``;
    ``nn.CrossEntropyLoss`` and ``F.cross_entropy`` are ``crossentropy``; ``F.layer_norm`` and ``nn.LayerNorm``
    are ``layernorm``."""
    name = spelling.rpartition(".")[2].lower().replace("_", "")
    return name.removesuffix("loss") or name


def torch_ops(source: str, where: str = "source") -> frozenset[str]:
    """The set of torch ops the module computes with (kzcore.decontam's module doc, step 3), each named by
    `op_name`."""
    tree = _parse(source, where)
    aliases = _aliases(tree)
    aliases.setdefault("torch", "torch")
    methods = _tensor_methods()
    found: set[str] = set()
    for top in tree.body:
        if not isinstance(top, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or top.name in _INPUT_FUNCTIONS:
            continue
        in_init = {
            id(n)
            for f in ast.walk(top)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__init__"
            for n in ast.walk(f)
        }
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                func = node.func
                path = qualified_name(func, aliases)
                if id(node) in in_init:
                    # the constructor's ops are the nn modules it builds (nn.Conv2d, nn.Parameter); its
                    # initial values (torch.randn, nn.init.uniform_) are not the computation
                    last = (path or "").rpartition(".")[2]
                    if path and path.startswith("torch.nn.") and last[:1].isupper():
                        found.add(op_name(path))
                elif path:
                    found.add(op_name(path))
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in methods
                    and not (isinstance(func.value, ast.Name) and func.value.id == "self")
                ):
                    found.add(op_name(func.attr))
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and id(node) not in in_init:
                name = _BINOPS.get(type(node.op))
                if name:
                    found.add(name)
    return frozenset(found)


@attrs.frozen
class Fingerprint:
    tokens: tuple[str, ...]
    ops: frozenset[str]


def fingerprint(problem: Problem) -> Fingerprint:
    where = label(problem)
    return Fingerprint(normalized_tokens(problem.source, where), torch_ops(problem.source, where))


def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """SequenceMatcher ratio of two token lists (kzcore.decontam's module doc, step 2)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
