"""The syntax-tree rewriter behind `tunefleet.cli.port.port_source`.

It records byte-span edits on the original text (the tree's positions are UTF-8 byte
offsets), so everything outside a changed span stays as written.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import dataclass, field

from tunefleet.cli.port_map import (
    ATTRIBUTE_MODULES,
    INIT_KEPT_KEYWORDS,
    LOCAL_ADDRESSES,
    MODULES,
    NAMES,
    UNPORTED_REASONS,
)


@dataclass(frozen=True)
class Unported:
    """One place `port_source` left as it was: its line, why, and the line's code."""

    line: int
    reason: str
    code: str


@dataclass(frozen=True)
class Ported:
    """The ported source text and what was left unported, in line order."""

    text: str
    unported: list[Unported] = field(default_factory=list)


def _is_ray(module: str | None) -> bool:
    return module is not None and (module == "ray" or module.startswith("ray."))


@functools.cache
def _exists(module: str, name: str | None = None) -> bool:
    """Whether tunefleet has `module` (and `name` in it); a missing framework is trusted."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        return not (missing == module or module.startswith(missing + "."))
    except ImportError:  # the module needs a framework that is not installed here
        return True
    if name is None or hasattr(mod, name):
        return True
    return hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None


def _target(ray_module: str, name: str) -> tuple[str, str] | None:
    """Where `ray_module.name` lives in tunefleet, or None if tunefleet has no such name."""
    module, new_name = NAMES.get((ray_module, name), (MODULES[ray_module], name))
    return (module, new_name) if _exists(module, new_name) else None


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function binds locally: its parameters and what its body assigns."""
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    names = {a.arg for a in every if a is not None}
    declared: set[str] = set()
    body: list[ast.AST] = [function.body] if isinstance(function, ast.Lambda) else [*function.body]
    while body:
        node = body.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)  # its body is its own scope
            continue
        elif isinstance(node, ast.Lambda):
            continue
        body.extend(ast.iter_child_nodes(node))
    return names - declared


def _no_counterpart(ray_path: str) -> str:
    first = ray_path.split(".")[1] if "." in ray_path else ray_path
    if ray_path.count(".") == 1 and first in UNPORTED_REASONS:
        return UNPORTED_REASONS[first]
    return f"tunefleet has no counterpart of {ray_path}"


class Porter:
    """One source text being ported: `run` returns the result."""

    def __init__(self, source: str, tree: ast.Module) -> None:
        self.source = source
        self.data = source.encode("utf-8")
        self.tree = tree
        starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                starts.append(i + 1)
        self.line_starts = starts
        self.edits: list[tuple[int, int, str]] = []
        self.unported: list[Unported] = []
        self.bindings: dict[str, str] = {}  # name -> the Ray module it is bound to
        self.ray_left = 0  # uses of the name `ray` that stay
        self.extra_imports: list[str] = []
        self.dropped: set[int] = set()  # ids of statements removed
        self.blocks: dict[int, list[ast.stmt]] = {}
        self.existing_imports: set[str] = set()

    # -- positions and edits ---------------------------------------------------------------
    def _offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def _span(self, node: ast.expr | ast.stmt) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None
        return (
            self._offset(node.lineno, node.col_offset),
            self._offset(node.end_lineno, node.end_col_offset),
        )

    def _text(self, node: ast.expr | ast.stmt) -> str:
        start, end = self._span(node)
        return self.data[start:end].decode("utf-8")

    def _note(self, node: ast.expr | ast.stmt, reason: str) -> None:
        code = self.source.splitlines()[node.lineno - 1].strip()
        self.unported.append(Unported(line=node.lineno, reason=reason, code=code))

    # -- the passes ------------------------------------------------------------------------
    def run(self) -> Ported:
        self._scan()
        self._drop_cluster_calls(self.tree.body)
        self._visit(self.tree)
        self._port_imports()
        return Ported(text=self._apply(), unported=sorted(self.unported, key=lambda u: u.line))

    def _scan(self) -> None:
        """Which names are bound to Ray modules, and each statement's block."""
        for node in ast.walk(self.tree):
            for name in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    for stmt in block:
                        self.blocks[id(stmt)] = block
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not _is_ray(alias.name):
                        if alias.asname is None:
                            self.existing_imports.add(alias.name)
                    elif alias.asname is not None:
                        if alias.name in MODULES:
                            self.bindings[alias.asname] = alias.name
                    else:
                        self.bindings["ray"] = "ray"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_ray(node.module):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:
                        self.bindings[alias.asname or alias.name] = full

    def _ray_call(self, node: ast.expr, names: tuple[str, ...]) -> str | None:
        """`ray.<name>(...)` for one of `names`: the name; else None."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and self.bindings.get(node.func.value.id) == "ray"
            and node.func.attr in names
        ):
            return node.func.attr
        return None

    def _starts_local_ray(self, call: ast.Call) -> bool:
        """Whether `ray.init(...)` starts a new local Ray rather than joining a cluster."""
        address: ast.expr | None = call.args[0] if call.args else None
        for keyword in call.keywords:
            if keyword.arg is None or keyword.arg in INIT_KEPT_KEYWORDS:
                return False  # **kwargs: cannot tell; runtime_env: no counterpart
            if keyword.arg == "address":
                address = keyword.value
        if address is None:
            return True
        return isinstance(address, ast.Constant) and address.value in LOCAL_ADDRESSES

    def _droppable(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Pass):
            return True
        if isinstance(stmt, ast.Expr):
            name = self._ray_call(stmt.value, ("init", "shutdown"))
            if name == "shutdown":
                return True
            return (
                name == "init"
                and isinstance(stmt.value, ast.Call)
                and (self._starts_local_ray(stmt.value))
            )
        if isinstance(stmt, ast.If):
            test = stmt.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test = test.operand
            return self._ray_call(test, ("is_initialized",)) is not None and all(
                self._droppable(s) for s in [*stmt.body, *stmt.orelse]
            )
        return False

    def _drop_cluster_calls(self, block: list[ast.stmt]) -> None:
        """Remove `ray.init()` (local), `ray.shutdown()` and `if ray.is_initialized()` of them."""
        for stmt in block:
            if not isinstance(stmt, ast.Pass) and self._droppable(stmt):
                self.dropped.add(id(stmt))
                continue
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, name, None)
                if isinstance(inner, list):
                    self._drop_cluster_calls(inner)
            for handler in getattr(stmt, "handlers", []):
                self._drop_cluster_calls(handler.body)
            for case in getattr(stmt, "cases", []):
                self._drop_cluster_calls(case.body)

    def _visit(self, node: ast.AST, shadowed: frozenset[str] = frozenset()) -> None:
        if id(node) in self.dropped or isinstance(node, ast.Import | ast.ImportFrom):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            shadowed = shadowed | (_local_names(node) & self.bindings.keys())
        elif isinstance(node, ast.Attribute):
            chain: list[ast.Attribute] = [node]
            while isinstance(chain[-1].value, ast.Attribute):
                chain.append(chain[-1].value)
            root = chain[-1].value
            if isinstance(root, ast.Name) and self._bound(root.id, shadowed):
                self._port_chain(root, chain[::-1])
                return
        elif isinstance(node, ast.Name) and self._bound(node.id, shadowed) == "ray":
            self.ray_left += 1
            self._note(node, "the Ray module used as a value has no tunefleet counterpart")
            return
        for child in ast.iter_child_nodes(node):
            self._visit(child, shadowed)

    def _bound(self, name: str, shadowed: frozenset[str]) -> str | None:
        """The Ray module `name` refers to here, unless a local variable hides it."""
        return None if name in shadowed else self.bindings.get(name)

    def _port_chain(self, root: ast.Name, chain: list[ast.Attribute]) -> None:
        """Rewrite `tune.search.optuna.OptunaSearch`, `ray.train.report`, ... (innermost first)."""
        base = self.bindings[root.id]
        attrs = [a.attr for a in chain]
        depth = len(attrs)  # the number of attributes that name a Ray module
        while depth >= 0 and ".".join([base, *attrs[:depth]]) not in MODULES:
            depth -= 1
        if depth < 0:
            self.ray_left += 1
            self._note(root, _no_counterpart(".".join([base, *attrs[:1]])))
            return
        ray_module = ".".join([base, *attrs[:depth]])
        if depth == len(attrs):
            module, node, path = MODULES[ray_module], chain[-1], MODULES[ray_module]
        else:
            found = _target(ray_module, attrs[depth])
            if found is None:
                if base == "ray":
                    self.ray_left += 1
                self._note(root, _no_counterpart(f"{ray_module}.{attrs[depth]}"))
                return
            module, node, path = found[0], chain[depth], ".".join(found)
        bound = MODULES.get(base)
        if bound is not None and path.startswith(bound + "."):
            text = root.id + path[len(bound) :]
            if module != bound and module not in ATTRIBUTE_MODULES:
                self._need_import(module)
        else:
            text = path
            reachable = module == "tunefleet" or module in ATTRIBUTE_MODULES
            self._need_import("tunefleet" if reachable else module)
        start, end = self._span(node)
        if self.data[start:end].decode("utf-8") != text:
            self.edits.append((start, end, text))

    def _need_import(self, module: str) -> None:
        if module not in self.extra_imports:
            self.extra_imports.append(module)

    # -- import statements -----------------------------------------------------------------
    def _port_imports(self) -> None:
        anchor: ast.stmt | None = None
        replaced: dict[int, list[str]] = {}
        statements = [n for n in ast.walk(self.tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        statements.sort(key=lambda n: (n.lineno, n.col_offset))
        for stmt in statements:
            if isinstance(stmt, ast.Import):
                if not any(_is_ray(a.name) for a in stmt.names):
                    continue
                lines = self._port_import(stmt)
            elif stmt.level == 0 and _is_ray(stmt.module):
                lines = self._port_import_from(stmt)
            else:
                continue
            if anchor is None or (stmt in self.tree.body and anchor not in self.tree.body):
                anchor = stmt
            if lines is not None:
                replaced[id(stmt)] = lines
        if anchor is not None:
            extra = self._extra_import_lines()
            if extra:
                lines = replaced.get(id(anchor))
                replaced[id(anchor)] = ([self._text(anchor)] if lines is None else lines) + extra
        for stmt in statements:
            if id(stmt) in replaced:
                self._replace(stmt, replaced[id(stmt)])
        self._remove_dropped()

    def _extra_import_lines(self) -> list[str]:
        modules = [m for m in self.extra_imports if m not in self.existing_imports]
        if len(modules) > 1 and "tunefleet" in modules:
            modules.remove("tunefleet")  # `import tunefleet.x` binds `tunefleet` too
        return [f"import {m}" for m in modules]

    def _port_import(self, stmt: ast.Import) -> list[str] | None:
        """`import ray`, `import ray.tune as tune`; None if unchanged."""
        lines: list[str] = []
        changed = False
        for alias in stmt.names:
            original = alias.name + (f" as {alias.asname}" if alias.asname else "")
            if not _is_ray(alias.name):
                lines.append(f"import {original}")
            elif alias.asname is None:
                if self.ray_left:
                    lines.append(f"import {original}")
                else:
                    changed = True
            elif alias.name in MODULES and _exists(MODULES[alias.name]):
                lines.append(f"import {MODULES[alias.name]} as {alias.asname}")
                changed = True
            else:
                self._note(stmt, _no_counterpart(alias.name))
                lines.append(f"import {original}")
        if not changed:
            return None
        if len(stmt.names) > 1:  # keep the non-Ray names in one statement, as written
            kept = [line for line in lines if not line.startswith("import tunefleet")]
            ported = [line for line in lines if line.startswith("import tunefleet")]
            joined = ", ".join(line.removeprefix("import ") for line in kept)
            lines = ([f"import {joined}"] if kept else []) + ported
        return lines

    def _port_import_from(self, stmt: ast.ImportFrom) -> list[str] | None:
        """`from ray import tune`, `from ray.tune import X, Y as Z`; None if unchanged."""
        module = stmt.module or ""
        groups: dict[str, list[str]] = {}  # "from M import" -> names, in order
        kept: list[str] = []
        for alias in stmt.names:
            bound = alias.asname or alias.name
            original = alias.name + (f" as {alias.asname}" if alias.asname else "")
            full = f"{module}.{alias.name}"
            if full in MODULES and _exists(MODULES[full]):
                target = MODULES[full]
                if "." not in target:
                    groups.setdefault(f"import {target} as {bound}", [])
                    continue
                parent, last = target.rsplit(".", 1)
                groups.setdefault(f"from {parent} import", []).append(
                    last if last == bound else f"{last} as {bound}"
                )
                continue
            found = None
            if module in MODULES:
                found = _exists(MODULES[module]) and (
                    alias.name == "*" or _target(module, alias.name)
                )
            if not found:
                self._note(stmt, _no_counterpart(full if alias.name != "*" else module))
                kept.append(original)
                continue
            if alias.name == "*":
                groups.setdefault(f"from {MODULES[module]} import", []).append("*")
                continue
            assert isinstance(found, tuple)
            new_module, new_name = found
            groups.setdefault(f"from {new_module} import", []).append(
                new_name if new_name == bound else f"{new_name} as {bound}"
            )
        if not groups:
            return None
        lines = [f"{head} {', '.join(names)}" if names else head for head, names in groups.items()]
        if kept:
            lines.append(f"from {module} import {', '.join(kept)}")
        return lines

    # -- applying --------------------------------------------------------------------------
    def _alone(self, stmt: ast.stmt) -> bool:
        """Whether `stmt` starts its line (nothing but indentation before it)."""
        start, _ = self._span(stmt)
        line_start = self.line_starts[stmt.lineno - 1]
        return not self.data[line_start:start].strip()

    def _replace(self, stmt: ast.stmt, lines: list[str]) -> None:
        if not lines:
            self.dropped.add(id(stmt))
            return
        start, end = self._span(stmt)
        if self._alone(stmt):
            indent = self.data[self.line_starts[stmt.lineno - 1] : start].decode("utf-8")
            text = ("\n" + indent).join(lines)
        else:
            text = "; ".join(lines)
        self.edits.append((start, end, text))

    def _remove_dropped(self) -> None:
        seen: set[int] = set()
        for stmt_id in self.dropped:
            block = self.blocks[stmt_id]
            if id(block) in seen:
                continue
            seen.add(id(block))
            # A block must keep one statement: the first of an emptied block becomes `pass`.
            emptied = block is not self.tree.body and all(id(s) in self.dropped for s in block)
            for i, stmt in enumerate(block):
                if id(stmt) in self.dropped:
                    self._remove(stmt, pass_instead=emptied and i == 0)

    def _remove(self, stmt: ast.stmt, pass_instead: bool) -> None:
        start, end = self._span(stmt)
        if pass_instead or not self._alone(stmt):
            self.edits.append((start, end, "pass"))
            return
        line_end = self.data.find(b"\n", end)
        line_end = len(self.data) if line_end < 0 else line_end + 1
        rest = self.data[end:line_end].strip()
        if rest and not rest.startswith(b"#"):  # `import ray; x = 1`
            self.edits.append((start, end, "pass"))
            return
        self.edits.append((self.line_starts[stmt.lineno - 1], line_end, ""))

    def _apply(self) -> str:
        out = bytearray(self.data)
        for start, end, text in sorted(self.edits, reverse=True):
            out[start:end] = text.encode("utf-8")
        return out.decode("utf-8")
