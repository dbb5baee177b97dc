"""The import structure of `osd/`: no cycle, no arrow from a lower layer to a higher one, and the two
command-line modules (`osd.train`, `osd.cli`) imported by nothing but their own entry points.

Every `import` counts: inside functions, and inside `if TYPE_CHECKING:` blocks (an annotation's import
is an arrow of the design too, and a cycle through one breaks as soon as it runs, e.g. under
`typing.get_type_hints`).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module belongs to the first layer one of whose prefixes it starts with
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "osd.paths",
            "osd.alpha",
            "osd.user_errors",
            "osd.datafiles",
            "osd.conversations",
            "osd.prompting",
            "osd.metric_keys",
            "osd.streams",
            "osd.cost_model",
            "osd.alpha",
            "osd.online.config",
            "osd.online.records",
        ),
    ),  # fmt: skip
    ("engine", ("osd.spec",)),
    # loading (osd.demo.target materialises the embedded target for the loaders) and distillation
    ("distill", ("osd.model_checks", "osd.models", "osd.demo.target", "osd.distill", "osd.online")),
    ("tools", ("osd.analysis", "osd.serving", "osd.plots", "osd.dashboard", "osd.results")),
    ("apps", ("osd.demo", "osd.train", "osd.cli", "osd")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, package: str) -> set[str]:
    """Every module name `tree` imports anywhere (functions and TYPE_CHECKING blocks included; from-imports
    also as module.name)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def import_graph(folders: tuple[str, ...] = ("osd",)) -> dict[str, set[str]]:
    """module -> the `osd` modules it imports, for every module under `folders`."""
    files = {module_name(p): p for folder in folders for p in (ROOT / folder).rglob("*.py")}
    ours = {module_name(p) for p in (ROOT / "osd").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = imported_names(ast.parse(path.read_text()), package)
        graph[name] = {m for m in imported if m in ours and m != name}
    return graph


def layer(module: str) -> int:
    return next(i for i, (_, prefixes) in enumerate(LAYERS) if module.startswith(prefixes))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path of modules, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_layers_prefixes_take_every_module():
    assert all(layer(m) < len(LAYERS) for m in import_graph())


def test_no_import_runs_upward():
    graph = import_graph()
    upward = sorted(
        f"{m} ({LAYERS[layer(m)][0]}) -> {t} ({LAYERS[layer(t)][0]})"
        for m, targets in graph.items()
        for t in targets
        if layer(t) > layer(m) and not m.startswith(t + ".")  # a module may import its own package
    )
    assert upward == []


def test_no_import_cycle():
    graph = import_graph()
    # a package's __init__ re-exporting its submodules is not a cycle with them
    graph = {m: {t for t in ts if not (m.startswith(t + ".") and t in graph)} for m, ts in graph.items()}
    assert find_cycle(graph) is None


@pytest.mark.parametrize("cli_module", ["osd.train", "osd.cli"])
def test_command_line_modules_are_entry_points_only(cli_module):
    importers = sorted(
        m
        for m, targets in import_graph(("osd", "benchmarks", "data")).items()
        if cli_module in targets and m not in ("osd.train", "osd.cli")
    )
    assert importers == []


def test_scan_sees_cycles_and_upward_arrows(tmp_path):
    """The checks above would fail on a cycle or an upward arrow (the scan itself is tested)."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import osd.x\ndef f():\n    from .y import z\n"
    )
    assert imported_names(tree, "osd.spec") == {
        "typing",
        "typing.TYPE_CHECKING",
        "osd.x",
        "osd.spec.y",
        "osd.spec.y.z",
    }
    assert layer("osd.spec.decoder") < layer("osd.distill.trainer") < layer("osd.analysis.simulate")


def run_python(code: str, env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_importing_osd_changes_no_environment_variable():
    """A library leaves the process's environment to its caller (osd once set THP_MEM_ALLOC_ENABLE on import).
    The models' modules are imported first: importing transformers' modelling code sets TORCHINDUCTOR_CACHE_DIR,
    which is not osd's doing."""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    code = (
        "import os\n"
        "from transformers import LlamaForCausalLM, T5ForConditionalGeneration, Trainer\n"
        "before = dict(os.environ)\n"
        "import osd\n"
        "after_osd = dict(os.environ)\n"
        "import osd.spec, osd.models, osd.distill.experiment\n"
        "print(before == after_osd == dict(os.environ))"
    )
    assert run_python(code, env).split()[-1] == "True"


@pytest.mark.parametrize("chosen", [None, "0"])
def test_the_training_entry_point_asks_torch_for_huge_pages_before_importing_it(chosen):
    """`osd.train` sets THP_MEM_ALLOC_ENABLE (unless the user chose) before torch is imported, which reads it
    once: the value is recorded at the moment torch's import starts."""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if chosen is not None:
        env["THP_MEM_ALLOC_ENABLE"] = chosen
    code = (
        "import os, sys\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch': print(os.environ.get('THP_MEM_ALLOC_ENABLE'))\n"
        "sys.meta_path.insert(0, Spy())\n"
        "import osd.train"
    )
    assert run_python(code, env).split()[0] == (chosen or "1")
