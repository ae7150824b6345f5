"""MkDocs hook: pages that are generated from the code, not written by hand.

Two placeholders, each an HTML comment on its own lines in a page's Markdown:

``<!-- schema: package.module:OBJECT ... -->``
    An Arrow schema (a ``pyarrow.Schema``), rendered as a table of column, type and meaning, in
    the schema's own column order. The comment's body gives each column's meaning, one
    ``column: meaning`` per line (continuation lines indented); ``a, b: meaning`` gives several
    columns the same meaning. A field's own ``doc`` metadata, where the code sets it, wins. The table
    is rendered by ``sleight.rundir.schema_markdown`` where the package has it, else here.

``<!-- cli: tamper run -->``
    The ``--help`` text of one ``sleight`` command, taken from ``sleight.cli.main.build_parser``.
    ``<!-- cli: * -->`` gives every command, each under its own heading (``## sleight tamper run``).

``<!-- fields: package.module:OBJECT -->``
    A mapping of field name to meaning (a JSON record's documented fields, such as the run
    manifest's), rendered as a table by ``sleight.rundir.fields_markdown`` where it exists.

``<!-- packages: sleight -->``
    A table of the package's subpackages and modules with the first paragraph of each docstring,
    read from the source files (nothing is imported).

``<!-- scripts: benchmarks -->``
    The same for the scripts in a folder of the repository (relative to ``mkdocs.yml``).

``<!-- layers: tests/test_architecture.py -->``
    The package's layers as that test holds them: each layer, the layers it may import (``ALLOWED``)
    and its sub-layers bottom first (``TIERS``), read from the test's source (nothing is imported).

The build stops with a message that names the page and the placeholder when a schema cannot be
imported or is not a schema, when a described column is not in the schema (a renamed or removed
column), or when a command does not exist. A column with no meaning is a warning, which
``mkdocs build --strict`` turns into a failure. The list of schemas lives in the pages alone.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger

log = get_plugin_logger("generated")

_SCHEMA = re.compile(r"^<!--\s*schema:\s*(?P<target>[\w.]+:\w+)[ \t]*\n?(?P<body>.*?)-->[ \t]*$", re.S | re.M)
_CLI = re.compile(r"^<!--\s*cli:\s*(?P<command>[\w -]*?|\*)\s*-->[ \t]*$", re.M)
_KEY = re.compile(r"^(?P<keys>[A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*:\s+(?P<text>.*)$")
_FIELDS = re.compile(r"^<!--\s*fields:\s*(?P<target>[\w.]+:\w+)\s*-->[ \t]*$", re.M)
_SCRIPTS = re.compile(r"^<!--\s*scripts:\s*(?P<folder>[\w./-]+)\s*-->[ \t]*$", re.M)
_PACKAGES = re.compile(r"^<!--\s*packages:\s*(?P<package>[\w.]+)\s*-->[ \t]*$", re.M)
_LAYERS = re.compile(r"^<!--\s*layers:\s*(?P<test>[\w./-]+)\s*-->[ \t]*$", re.M)
HELP_WIDTH = "80"


def on_page_markdown(markdown: str, page, config, files) -> str:
    where = page.file.src_uri
    markdown = _SCHEMA.sub(lambda m: _schema_table(m.group("target"), m.group("body"), where), markdown)
    markdown = _FIELDS.sub(lambda m: _fields_table(m.group("target"), where), markdown)
    markdown = _PACKAGES.sub(lambda m: _package_table(m.group("package"), where), markdown)
    root = Path(config["config_file_path"]).parent
    markdown = _SCRIPTS.sub(lambda m: _scripts_table(root, m.group("folder"), where), markdown)
    markdown = _LAYERS.sub(lambda m: _layers_table(root, m.group("test"), where), markdown)
    return _CLI.sub(lambda m: _cli_help(m.group("command"), where), markdown)


# -- schemas ---------------------------------------------------------------------------------------
def _import(target: str, where: str):
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same docs error
        raise PluginError(f"{where}: schema {target}: cannot import {module_name} ({type(exc).__name__}: {exc})") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PluginError(f"{where}: schema {target}: {module_name} has no attribute {attr!r}") from None


def _descriptions(body: str, target: str, where: str) -> dict[str, tuple[int, str]]:
    """column -> (group number, meaning) from the placeholder's body."""
    out: dict[str, tuple[int, str]] = {}
    group = -1
    for raw in body.splitlines():
        if not raw.strip():
            continue
        if raw[:1].isspace():
            if group < 0:
                raise PluginError(f"{where}: schema {target}: indented line before any column: {raw.strip()!r}")
            for key, (g, text) in list(out.items()):
                if g == group:
                    out[key] = (g, f"{text} {raw.strip()}")
            continue
        m = _KEY.match(raw)
        if not m:
            raise PluginError(f"{where}: schema {target}: expected 'column: meaning', got {raw.strip()!r}")
        group += 1
        for key in (k.strip() for k in m.group("keys").split(",")):
            if key in out:
                raise PluginError(f"{where}: schema {target}: column {key!r} described twice")
            out[key] = (group, m.group("text").strip())
    return out


def type_name(t) -> str:
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {type_name(f.type)}" for f in t) + ">"
    if pa.types.is_dictionary(t):
        return type_name(t.value_type)
    return {"string": "str", "large_string": "str", "bool": "bool"}.get(str(t), str(t))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _own_schema_markdown(schema, notes=None) -> str:
    notes = dict(notes or {})
    lines = ["| column | type | meaning |", "|---|---|---|"]
    for field in schema:
        kind = type_name(field.type) + ("" if field.nullable else ", not null")
        lines.append(f"| `{field.name}` | {_cell(kind)} | {_cell(notes.get(field.name, ''))} |")
    return "\n".join(lines) + "\n"


def _schema_table(target: str, body: str, where: str) -> str:
    import pyarrow as pa

    schema = _import(target, where)
    if not isinstance(schema, pa.Schema):
        raise PluginError(f"{where}: schema {target}: is a {type(schema).__name__}, not a pyarrow.Schema")
    notes = {name: text for name, (_, text) in _descriptions(body, target, where).items()}
    unknown = sorted(set(notes) - set(schema.names))
    if unknown:
        raise PluginError(
            f"{where}: schema {target}: described column(s) not in the schema: {', '.join(unknown)} "
            f"(schema columns: {', '.join(schema.names)})"
        )
    for field in schema:  # a field's own doc metadata wins over the page's note
        doc = (field.metadata or {}).get(b"doc")
        if doc:
            notes[field.name] = doc.decode()
        elif not notes.get(field.name):
            log.warning(f"{where}: schema {target}: column {field.name!r} has no meaning; describe it in the placeholder")
    try:  # the package's own renderer, where it has one
        from sleight.rundir import schema_markdown
    except ImportError:
        schema_markdown = _own_schema_markdown
    return schema_markdown(schema, notes) + f"\n<small>Generated from `{target}` ({len(schema)} columns).</small>\n"


def _fields_table(target: str, where: str) -> str:
    fields = _import(target, where)
    if not isinstance(fields, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items()):
        raise PluginError(f"{where}: fields {target}: not a dict of field name to meaning")
    try:
        from sleight.rundir import fields_markdown
        table = fields_markdown(fields)
    except ImportError:
        rows = [f"| `{k}` | {_cell(v)} |" for k, v in fields.items()]
        table = "\n".join(["| field | meaning |", "|---|---|", *rows]) + "\n"
    return table + f"\n<small>Generated from `{target}`.</small>\n"


# -- CLI -------------------------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    return "```text\n" + parser.format_help().rstrip() + "\n```\n"


def _tree(parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * min(level, 6)} {parser.prog}\n", _help(parser)]
    for sub in _subcommands(parser).values():
        out += _tree(sub, level + 1)
    return out


def _cli_help(command: str, where: str) -> str:
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to the terminal; pages get a fixed width
    try:
        from sleight.cli.main import build_parser
    except Exception as exc:  # noqa: BLE001
        raise PluginError(f"{where}: cli {command!r}: cannot import sleight.cli.main.build_parser ({exc})") from exc
    parser = build_parser()
    if command == "*":
        return "\n".join(_tree(parser, 2))
    for word in command.split():
        subs = _subcommands(parser)
        if word not in subs:
            raise PluginError(f"{where}: cli {command!r}: no command {word!r} (choices: {', '.join(subs) or 'none'})")
        parser = subs[word]
    return _help(parser)


# -- package layout --------------------------------------------------------------------------------
def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)  # Sphinx roles -> code
    return text.replace("``", "`")


def _package_table(package: str, where: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(f"{where}: packages {package!r}: not an importable package")
    root = Path(next(iter(spec.submodule_search_locations)))
    rows = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            name, source = f"{package}.{path.name}", path / "__init__.py"
        elif path.suffix == ".py" and path.name != "__init__.py":
            name, source = f"{package}.{path.stem}", path
        else:
            continue
        text = _summary(source)
        if not text:
            log.warning(f"{where}: packages: {name} has no docstring")
        short = f"{path.name}/" if source.name == "__init__.py" else path.name
        rows.append(f"| `{short}` | {_cell(text)} |")
    return "\n".join([f"| `{package}` | what it is |", "|---|---|", *rows]) + "\n"


def _scripts_table(root: Path, folder: str, where: str) -> str:
    path = root / folder
    if not path.is_dir():
        raise PluginError(f"{where}: scripts {folder!r}: no such folder next to mkdocs.yml")
    rows = []
    for script in sorted(path.glob("*.py")):
        text = _summary(script)
        if not text:
            log.warning(f"{where}: scripts: {folder}/{script.name} has no docstring")
        rows.append(f"| `python {folder}/{script.name}` | {_cell(text)} |")
    return "\n".join(["| script | what it measures |", "|---|---|", *rows]) + "\n"


# -- layers ------------------------------------------------------------------------------------------
def _layers_table(root: Path, test: str, where: str) -> str:
    """``ALLOWED`` and ``TIERS`` of the architecture test, as a table (their literals evaluated with
    the test's own ``SHARED``; nothing imported)."""
    path = root / test
    if not path.is_file():
        raise PluginError(f"{where}: layers {test!r}: no such file next to mkdocs.yml")
    values: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("SHARED", "ALLOWED", "TIERS") and node.value is not None:
            values[target.id] = eval(compile(ast.Expression(node.value), test, "eval"), {"__builtins__": {"set": set}}, dict(values))  # noqa: S307
    if not {"ALLOWED", "TIERS"} <= set(values):
        raise PluginError(f"{where}: layers {test!r}: the file defines no ALLOWED and TIERS")
    allowed, tiers = values["ALLOWED"], values["TIERS"]
    assert isinstance(allowed, dict) and isinstance(tiers, dict)
    rows = []
    for layer in allowed:
        may = ", ".join(f"`{x}`" for x in sorted(set(allowed[layer]) - {layer})) or "nothing"
        subs = " < ".join(", ".join(f"`{m}`" for m in tier) for tier in tiers.get(layer, ())) or "one module"
        rows.append(f"| `{layer}` | {may} | {subs} |")
    return "\n".join(["| layer | may import | its sub-layers, bottom first (each imports its own and lower ones) |", "|---|---|---|", *rows]) + "\n"
