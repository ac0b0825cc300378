"""The syntax-tree rewriter behind `tunefleet.cli.port.port_source`.

It records byte-span edits on the original text (the tree's positions are UTF-8 byte
offsets), so everything outside a changed span stays as written.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tunefleet.cli._port_lookup import (
    counterpart,
    exists,
    from_import,
    is_ray,
    module_of,
    no_counterpart,
)
from tunefleet.cli.port_map import ATTRIBUTE_MODULES, INIT_KEPT_KEYWORDS, LOCAL_ADDRESSES

_FROM_MODULE = re.compile(rb"from[\s\\]+([\w.\s\\]*?)[\s\\]+import\b")


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
        self.ray_paths: set[str] = set()  # the dotted Ray paths those uses name
        self.extra_imports: list[str] = []
        self.dropped: set[int] = set()  # ids of statements removed
        self.blocks: dict[int, list[ast.stmt]] = {}
        self.existing_imports: set[str] = set()
        self.plain_ray_import = False  # the program has `import ray`

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
        item = Unported(line=node.lineno, reason=reason, code=code)
        if item not in self.unported:  # `[ray.put(a), ray.put(b)]`: one line, one entry
            self.unported.append(item)

    def _keep_ray(self, path: str) -> None:
        """A use of the name `ray` (naming `path`) stays as written."""
        self.ray_left += 1
        self.ray_paths.add(path)

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
                    if not is_ray(alias.name):
                        if alias.asname is None:
                            self.existing_imports.add(alias.name)
                    elif alias.asname is not None:
                        if module_of(alias.name) is not None:
                            self.bindings[alias.asname] = alias.name
                    else:
                        self.bindings["ray"] = "ray"
                        self.plain_ray_import |= alias.name == "ray"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and is_ray(node.module):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if module_of(full) is not None:
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
            if isinstance(node.ctx, ast.Load):  # not `ray = None` after a failed import
                self._keep_ray("ray")
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
        while depth >= 0 and (
            module_of(".".join([base, *attrs[:depth]]), guess=depth < len(attrs)) is None
        ):
            depth -= 1
        if depth < 0:
            self._keep_ray(".".join([base, *attrs]))
            self._note(root, no_counterpart(".".join([base, *attrs[:1]])))
            return
        ray_module = ".".join([base, *attrs[:depth]])
        if depth == len(attrs):
            module = path = module_of(ray_module, guess=False) or ""
            node = chain[-1]
        else:
            found = counterpart(ray_module, attrs[depth])
            if found is None:
                if base == "ray":
                    self._keep_ray(".".join([base, *attrs]))
                self._note(root, no_counterpart(f"{ray_module}.{attrs[depth]}"))
                return
            module, node, path = found[0], chain[depth], ".".join(found)
        bound = module_of(base)
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
                if not any(is_ray(a.name) for a in stmt.names):
                    continue
                lines = self._port_import(stmt)
            elif stmt.level == 0 and is_ray(stmt.module):
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
            ours = module_of(alias.name)
            if not is_ray(alias.name):
                lines.append(f"import {original}")
            elif alias.asname is not None and ours is not None and exists(ours):
                named = "" if ours == alias.asname else f" as {alias.asname}"
                lines.append(f"import {ours}{named}")
                changed = True
            elif alias.asname is None and (alias.name == "ray" or ours is not None):
                # `import ray.tune` binds `ray`: it stays while a use of `ray` stays
                used = any(
                    p == alias.name or p.startswith(alias.name + ".") for p in self.ray_paths
                )
                if self.ray_left and (used or alias.name == "ray"):
                    lines.append(f"import {original}")
                elif self.ray_left and not self.plain_ray_import:
                    lines.append("import ray")
                    changed = True
                else:
                    changed = True
            else:
                self._note(stmt, no_counterpart(alias.name))
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
        ours = module_of(module)
        groups: dict[str, list[str]] = {}  # "from M import" -> names, in order
        kept: list[str] = []
        originals: list[str] = []
        for alias in stmt.names:
            bound = alias.asname or alias.name
            original = alias.name + (f" as {alias.asname}" if alias.asname else "")
            originals.append(original)
            full = f"{module}.{alias.name}"
            sub = module_of(full, guess=False)  # `from ray.tune import search`
            if sub is not None and exists(sub):
                if "." not in sub:
                    groups.setdefault(f"import {sub} as {bound}", [])
                    continue
                parent, last = sub.rsplit(".", 1)
                groups.setdefault(f"from {parent} import", []).append(
                    last if last == bound else f"{last} as {bound}"
                )
                continue
            found = (
                ours is not None
                and exists(ours)
                and (alias.name == "*" or counterpart(module, alias.name))
            )
            if not found:
                self._note(stmt, no_counterpart(full if alias.name != "*" else module))
                kept.append(original)
                continue
            if alias.name == "*":
                groups.setdefault(f"from {ours} import", []).append("*")
                continue
            assert isinstance(found, tuple)
            new_module, new_name = found
            groups.setdefault(f"from {new_module} import", []).append(
                new_name if new_name == bound else f"{new_name} as {bound}"
            )
        if not groups:
            return None
        if kept:
            groups[f"from {module} import"] = kept
        heads = list(groups)
        if len(heads) == 1 and heads[0].startswith("from ") and groups[heads[0]] == originals:
            renamed = self._rename_module(stmt, heads[0].split()[1])
            if renamed is not None:
                return [renamed]
        start, _ = self._span(stmt)
        written = self.data[self.line_starts[stmt.lineno - 1] : start].decode("utf-8")
        indent = written if stmt.end_lineno != stmt.lineno and not written.strip() else None
        return [from_import(head, names, indent) for head, names in groups.items()]

    def _rename_module(self, stmt: ast.ImportFrom, new: str) -> str | None:
        """`stmt`'s text with only its module changed, as written (parentheses, comments)."""
        start, end = self._span(stmt)
        text = self.data[start:end]
        match = _FROM_MODULE.match(text)
        if match is None or re.sub(rb"[\s\\]", b"", match.group(1)) != (stmt.module or "").encode():
            return None
        return (text[: match.start(1)] + new.encode() + text[match.end(1) :]).decode("utf-8")

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
