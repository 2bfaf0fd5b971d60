"""No import cycle among the modules of tf_ps_ops and sfb, counting every import: at
module level and inside functions and methods, absolute and relative, `import a.b`,
`from a import b` (b a module or a name), `from . import b`, and the package's lazy
exports (`_EXPORTS`/`_SUBMODULES` read by common/lazy.py, imported on first access).

A cycle means a module below is missing (docs/internals.md, "The Python package").
"""

import ast
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("tf_ps_ops", "sfb")


def modules_under(root, packages=PACKAGES):
    """{module name: path} of every .py file of `packages` under `root`."""
    out = {}
    for package in packages:
        for base, folders, files in os.walk(os.path.join(root, package)):
            folders[:] = sorted(f for f in folders if f != "__pycache__")
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                parts = os.path.relpath(os.path.join(base, name), root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = os.path.join(base, name)
    return out


def _lazy_exports(tree):
    """The submodules a package's lazy export table names (relative to the package)."""
    targets = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = getattr(node.targets[0], "id", None)
        if target == "_EXPORTS" and isinstance(node.value, ast.Dict):
            targets += [value.value for value in node.value.values]
        elif target == "_SUBMODULES" and isinstance(node.value, (ast.Tuple, ast.List)):
            targets += [element.value for element in node.value.elts]
    return targets


def imports_of(name, path, known):
    """The modules of `known` that module `name` (file `path`) imports, anywhere in it."""
    tree = ast.parse(open(path).read(), path)
    is_package = os.path.basename(path) == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()

    def add(module):
        # `import a.b.c` binds a name in a, a.b and a.b.c: the deepest one we know.
        while module and module not in known:
            module = module.rpartition(".")[0]
        if module:
            found.add(module)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base)
    if is_package:
        for relative in _lazy_exports(tree):
            add(f"{name}.{relative}")
    found.discard(name)
    return found


def import_graph(root, packages=PACKAGES):
    known = modules_under(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph):
    """One cycle (a list of modules, the first repeated at the end) per strongly connected
    component of more than one module, shortest first (Tarjan's algorithm)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted((_a_cycle_in(graph, component) for component in components), key=len)


def _a_cycle_in(graph, component):
    # Breadth-first from the first module back to itself, inside the component.
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor == start:
                    return paths[node] + [start]
                if successor not in paths:
                    paths[successor] = paths[node] + [successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def _describe(found):
    return "; ".join(" -> ".join(cycle) for cycle in found)


def _closes(found, importer, imported):
    """Whether a cycle of `found` goes through the import importer -> imported."""
    return any((importer, imported) in zip(cycle, cycle[1:]) for cycle in found)


def test_no_import_cycle():
    found = cycles(import_graph(REPO))
    assert not found, f"import cycles: {_describe(found)}"


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph(REPO)
    assert "tf_ps_ops.collectives.raw" in graph["tf_ps_ops.collectives.ops"]  # module level
    assert "tf_ps_ops.ps.ps_mode" in graph["tf_ps_ops.common.init"]  # inside a function
    assert "tf_ps_ops.common.init" in graph["tf_ps_ops"]  # a lazy export
    assert "tf_ps_ops.callbacks" in graph["tf_ps_ops.keras"]  # from package import module
    assert "tf_ps_ops" in graph["sfb.layers"]  # import package


def _copy(tmp_path):
    ignore = shutil.ignore_patterns("cc", "kernels", "bin", "*.so", "__pycache__")
    for package in PACKAGES:
        shutil.copytree(os.path.join(REPO, package), tmp_path / package, ignore=ignore)
    return tmp_path


def _append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_a_function_local_import_that_closes_a_cycle_is_found(tmp_path):
    root = _copy(tmp_path)
    assert cycles(import_graph(root)) == []
    # basics.py asks process sets for something: basics -> process_sets -> basics.
    _append(root / "tf_ps_ops" / "common" / "basics.py",
            "\n\ndef _sets():\n    from tf_ps_ops.collectives import process_sets\n"
            "    return process_sets\n")
    found = cycles(import_graph(root))
    assert found == [["tf_ps_ops.collectives.process_sets", "tf_ps_ops.common.basics",
                      "tf_ps_ops.collectives.process_sets"]], _describe(found)
    assert "basics" in _describe(found) and "process_sets" in _describe(found)


def test_a_relative_import_in_a_method_that_closes_a_cycle_is_found(tmp_path):
    root = _copy(tmp_path)
    # raw.py reaching up to ops.py, which imports raw.py: raw -> ops -> raw.
    _append(root / "tf_ps_ops" / "collectives" / "raw.py",
            "\n\nclass _Up:\n    def ops(self):\n        from . import ops\n        return ops\n")
    found = cycles(import_graph(root))
    assert _closes(found, "tf_ps_ops.collectives.raw", "tf_ps_ops.collectives.ops"), \
        _describe(found)


def test_a_module_that_imports_the_package_it_is_exported_from_is_a_cycle(tmp_path):
    root = _copy(tmp_path)
    _append(root / "tf_ps_ops" / "common" / "timeline.py", "\n\nimport tf_ps_ops  # noqa\n")
    found = cycles(import_graph(root))
    assert _closes(found, "tf_ps_ops.common.timeline", "tf_ps_ops"), _describe(found)
