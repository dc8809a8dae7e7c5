"""docs/architecture.md against the tree (and docs/development.md's index of
the tests against tests/): the layout block names every path
it lists and every top-level folder, the import rules it states hold, the
links back it lists are the ones liveroom/node.py makes, and the lifecycle's
start and stop orders are the ones it says."""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
NODE = ROOT / "liveroom" / "node.py"
ROLES = ("proxy", "recvsvr", "statsvr")
NAMES = {"store": "the store", "vip_list": "the whitelist", "recvsvr": "recvsvr",
         "statsvr": "statsvr", "proxy": "the proxy", "webhooks": "the webhooks' deliverer"}
"""How the doc names the parts of a node (the attributes of ``Node``)."""


def _blocks(lang: str) -> list[str]:
    """The fenced blocks of the doc opened with ``lang`` ("" for none)."""
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(), re.M | re.S)


def _layout() -> list[str]:
    """The paths the layout block names, one a line."""
    (block,) = [b for b in _blocks("") if b.startswith("liveroom/")]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def _tracked_top() -> set[str]:
    """The repository's top-level folders that git tracks files in (hidden ones aside)."""
    # The suite runs in a checkout (scripts/test, CI's clean clone): without
    # git the layout cannot be told from what is built or installed beside it.
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True, timeout=60).stdout
    return {f.split("/")[0] for f in listed.splitlines() if "/" in f and not f.startswith(".")}


def test_every_path_of_the_layout_exists() -> None:
    missing = [path for path in _layout() if not (ROOT / path).exists()]
    assert not missing, missing


def test_the_layout_names_every_top_level_folder() -> None:
    named = {path.split("/")[0] for path in _layout()}
    assert _tracked_top() - named == set()


def test_the_layout_names_every_script() -> None:
    (line,) = [line for line in _blocks("")[0].splitlines() if line.startswith("scripts/")]
    listed = set(re.findall(r"[\w-]+", line.split(None, 1)[1]))
    scripts = {p.name for p in (ROOT / "scripts").iterdir() if p.is_file()}
    assert scripts <= listed, scripts - listed


def imports_of(path: Path) -> set[str]:
    """The modules a module imports, absolute, at any depth (relative imports
    are its own package's and left out)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _roles_in(path: Path) -> set[str]:
    return {name for name in imports_of(path) if name.split(".")[0] in ROLES}


def test_a_role_never_imports_another() -> None:
    for role in ROLES:
        assert (ROOT / role / "role.py").is_file()
        for path in (ROOT / role).rglob("*.py"):
            others = {n for n in _roles_in(path) if n.split(".")[0] != role}
            assert not others, f"{path.relative_to(ROOT)} imports {sorted(others)}"


def test_the_core_imports_roles_only_in_node_and_cli() -> None:
    for path in (ROOT / "liveroom").rglob("*.py"):
        roles = _roles_in(path)
        if path.relative_to(ROOT).as_posix() == "liveroom/node.py":
            assert roles == {"proxy", "recvsvr", "statsvr"}
        elif path.relative_to(ROOT).as_posix() == "liveroom/cli/ticket.py":
            assert roles == {"proxy.tickets"}  # liveroom ticket mints with it
        else:
            assert not roles, f"{path.relative_to(ROOT)} imports {sorted(roles)}"
    doc = " ".join(DOC.read_text().split())
    assert "a role never imports another" in doc
    assert "`liveroom/cli/ticket.py`, whose `liveroom ticket` imports `proxy.tickets`" in doc


def _proxy_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def proxy_imports(path: Path) -> set[str]:
    """The proxy modules (or packages) ``path`` imports, relative imports
    resolved, ``TYPE_CHECKING`` ones included."""
    module = _proxy_module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "proxy":
                # ``from . import answer`` names a module; ``from .x import y`` the module x.
                found.update(f"{target}.{alias.name}" if (ROOT / target.replace(".", "/")
                                                           / f"{alias.name}.py").exists()
                             else target for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "proxy")
    found.discard(module)
    return found


def _wing_of(module: str) -> str | None:
    """The wing a proxy module is in (None: the package's own top-level modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (ROOT / "proxy" / parts[1]).is_dir() else None


def _declared_wings() -> dict[str, set[str]]:
    """docs/architecture.md's table of the proxy's wings: each wing and the
    wings it imports."""
    rows = re.findall(r"^\| `proxy/(\w+)/` \| [^|]+ \| ([^|]+) \|$", DOC.read_text(), re.M)
    return {wing: set() if imports.strip() == "no wing" else
            {w.strip(" `/") for w in imports.split(",")} for wing, imports in rows}


def test_the_proxys_wings_import_only_what_the_doc_says() -> None:
    """Every sub-package of proxy/ is a wing of the doc's table, and imports
    exactly the wings its row names: the front knows no feature, no arrow
    runs back up, no two wings import each other. The top-level helpers
    (``auth``, ``reply``...) import no wing; only ``role.py`` (the
    assembly) and ``__init__.py`` may."""
    declared = _declared_wings()
    wings = {p.name for p in (ROOT / "proxy").iterdir() if (p / "__init__.py").is_file()}
    assert wings == set(declared), {"undeclared": wings - set(declared),
                                     "gone": set(declared) - wings}
    assert declared["front"] == set()  # the front knows no feature
    used: dict[str, set[str]] = {wing: set() for wing in wings}
    for path in (ROOT / "proxy").rglob("*.py"):
        module = _proxy_module(path)
        imported = {w for w in map(_wing_of, proxy_imports(path)) if w is not None}
        wing = _wing_of(module)
        if wing is None:
            if path.name not in ("role.py", "__init__.py"):
                assert not imported, f"{module} is a shared helper and imports {imported}"
            continue
        used[wing] |= imported - {wing}
    assert used == declared
    for wing, imports in declared.items():
        for other in imports:
            assert wing not in declared[other], f"{wing} and {other} import each other"


def test_the_node_wires_the_roles_entry_points() -> None:
    tree = ast.parse(NODE.read_text())
    wired = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
             and n.module in ROLES for a in n.names}
    assert wired == {("proxy", "Proxy"), ("proxy", "FrontSite"), ("recvsvr", "Recvsvr"),
                     ("statsvr", "Statsvr")}


def _function(name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    (found,) = [n for n in ast.parse(NODE.read_text()).body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    return found


def test_the_links_back_are_the_ones_the_node_makes() -> None:
    """Every call the node makes for its effect alone (not to build a part)
    is a link back, and the doc's assembly block shows each."""
    made = [ast.unparse(st) for st in ast.walk(_function("build_node"))
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)]
    made += [ast.unparse(st).replace("node.", "") for st in ast.walk(_function("_lifecycle"))
             if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
             and ast.unparse(st).startswith("node.store.notifier.")]
    (block,) = _blocks("python")
    shown = " ".join(block.split())
    assert len(made) == 6
    for call in made:
        assert call in shown, call
    assert "Six links go back" in " ".join(DOC.read_text().split())


def _awaited(body: list[ast.stmt]) -> list[str]:
    """The parts of the node whose start, stop or close ``body`` awaits, in order."""
    parts = []
    for st in body:
        if isinstance(st, ast.If):  # a part the settings may leave out (--webhook)
            parts += _awaited(st.body)
        elif (isinstance(st, ast.Expr) and isinstance(st.value, ast.Await)
                and isinstance(st.value.value, ast.Call)):
            target = ast.unparse(st.value.value.func)
            match = re.fullmatch(r"node\.(\w+)\.(start|stop|close)", target)
            if match:
                parts.append(NAMES[match[1]])
    return parts


def _order(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + ", then " + parts[-1]


def test_the_lifecycle_starts_and_stops_the_parts_in_the_order_the_doc_says() -> None:
    life = _function("_lifecycle")
    (attempt,) = [st for st in life.body if isinstance(st, ast.Try)]
    started = _awaited(life.body) + _awaited(attempt.body)
    stopped = _awaited(attempt.finalbody)
    assert sorted(started) == sorted(stopped) == sorted(NAMES.values())
    doc = " ".join(DOC.read_text().split())
    assert f"They start in the order the node is built: {_order(started)}." in doc
    assert f"in this order: {_order(stopped)}." in doc


def test_every_test_file_is_in_the_index_of_docs_development() -> None:
    """Every ``tests/<folder>/test_*.py`` listed once, each folder's lines
    together and in the order of their names."""
    doc = (ROOT / "docs" / "development.md").read_text()
    section = doc.split("## Index of the tests", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `tests/((?:\w+/)*test_\w+\.py)`: \S", section, re.M)
    tests = ROOT / "tests"
    files = sorted(p.relative_to(tests).as_posix() for p in tests.rglob("test_*.py"))
    assert sorted(listed) == files, {"missing": sorted(set(files) - set(listed)),
                                     "gone": sorted(set(listed) - set(files))}
    folders = [name.rpartition("/")[0] for name in listed]
    runs = [folder for folder, _ in itertools.groupby(folders)]
    assert len(runs) == len(set(runs)), f"a folder's lines apart: {runs}"
    for folder in runs:
        lines = [name for name in listed if name.rpartition("/")[0] == folder]
        assert lines == sorted(lines), f"tests/{folder}/ out of order: {lines}"


def test_no_test_file_imports_another() -> None:
    """What tests share lives in the shared modules at the top of tests/
    (support.py, front_corpus.py...), never in a test file."""
    tests = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    for path in (ROOT / "tests").rglob("*.py"):
        found = {name.split(".")[0] for name in imports_of(path)} & tests
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
