"""Bundle the page's ES modules into one classic script, for the exported file.

Chromium refuses ES modules loaded from ``file://`` (an opaque origin), so an
exported page cannot use ``<script type="module">``. The page's modules follow
three conventions that make a tiny, exact bundler possible:

* imports are single lines: ``import { a, b as c } from './x.js';``,
  ``import x from './x.js';`` or ``import * as x from './x.js';``;
* exports are declarations at the start of a line: ``export function f``,
  ``export const x``, ``export class C``, ``export async function f``, or one
  ``export default`` expression;
* there are no import cycles.

Each module becomes a function scope whose result is its export object; an
import becomes a ``const`` that reads it. Module order is the depth-first order
of the imports from the entry, so every module runs after what it imports,
exactly once, as in the browser.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable

__all__ = ["bundle"]

_IMPORT = re.compile(r"^import\s+(?P<what>.+?)\s+from\s+'(?P<path>[^']+)';\s*$")
_EXPORT = re.compile(r"^export\s+(?P<kind>async\s+function|function|const|let|class)\s+(?P<name>[A-Za-z_$][\w$]*)")
_DEFAULT = re.compile(r"^export\s+default\s+")
_STRAY = re.compile(r"^\s*(import|export)\b", re.M)


def _resolve(base: str, rel: str) -> str:
    if not rel.startswith("./") and not rel.startswith("../"):
        raise ValueError(f"{base}: only relative imports are bundled, got {rel!r}")
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), rel))


def _binding(what: str, ref: str) -> str:
    what = what.strip()
    if what.startswith("* as "):
        return f"const {what[5:].strip()} = {ref};"
    if what.startswith("{"):
        names = []
        for part in what.strip("{} ").split(","):
            part = part.strip()
            if not part:
                continue
            if " as " in part:
                a, b = (x.strip() for x in part.split(" as "))
                names.append(f"{a}: {b}")
            else:
                names.append(part)
        return f"const {{ {', '.join(names)} }} = {ref};"
    return f"const {what} = {ref}.default;"


def bundle(entry: str, read: Callable[[str], str]) -> str:
    """One classic script that runs ``entry`` and everything it imports.

    Args:
        entry: path of the entry module, relative to the static folder (``"app.js"``).
        read: returns a module's source text from its path.

    Raises:
        ValueError: an import cycle, a non-relative import, or an import/export
            the conventions above do not cover (so a new module cannot be
            bundled wrongly in silence).
    """
    order: list[str] = []
    bodies: dict[str, str] = {}
    visiting: set[str] = set()

    def visit(path: str) -> None:
        if path in bodies:
            return
        if path in visiting:
            raise ValueError(f"import cycle through {path}")
        visiting.add(path)
        out, exports = [], []
        for line in read(path).split("\n"):
            m = _IMPORT.match(line)
            if m:
                dep = _resolve(path, m.group("path"))
                visit(dep)
                out.append(_binding(m.group("what"), f"__modules[{dep!r}]"))
                continue
            m = _EXPORT.match(line)
            if m:
                exports.append(m.group("name"))
                out.append(line[len("export "):])
                continue
            if _DEFAULT.match(line):
                exports.append("default: __default")
                out.append(_DEFAULT.sub("const __default = ", line, count=1))
                continue
            out.append(line)
        text = "\n".join(out)
        stray = _STRAY.search(text)
        if stray:
            bad = text[stray.start():].split("\n", 1)[0]
            raise ValueError(f"{path}: cannot bundle {bad.strip()!r} (see relpos.explorer.bundle)")
        visiting.discard(path)
        bodies[path] = f"{text}\nreturn {{ {', '.join(exports)} }};"
        order.append(path)

    visit(entry)
    parts = ["(function () {", "'use strict';", "const __modules = Object.create(null);"]
    for path in order:
        parts.append(f"// ---- {path}")
        parts.append(f"__modules[{path!r}] = (function () {{\n{bodies[path]}\n}})();")
    parts.append("})();")
    return "\n".join(parts) + "\n"
