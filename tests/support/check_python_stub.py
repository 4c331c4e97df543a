#!/usr/bin/env python3
"""Fails when python/crown/_crown.pyi misses a binding of the built _crown.

Usage: check_python_stub.py SOURCE_ROOT   (with the build's python/ on PYTHONPATH)

Compares the public names of the built extension (dir(crown._crown), no
leading underscore) with the names the stub defines at its top level
(classes, functions, annotated or assigned names). Names the stub defines
that the extension lacks are listed too, as a note only: a build without
RDMA or the tensor engine lacks their bindings. Prints "python stub: ok"
when the stub misses nothing.
"""
import ast
import sys
from pathlib import Path


def stub_names(path: Path) -> set:
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_")}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    from crown import _crown

    built = {n for n in dir(_crown) if not n.startswith("_")}
    stub = stub_names(Path(sys.argv[1]) / "python" / "crown" / "_crown.pyi")
    # Names the stub uses only as type aliases (Entry) are not bindings.
    aliases = {"Entry"}
    missing = sorted(built - stub)
    stale = sorted(stub - built - aliases)
    for name in missing:
        print(f"_crown.pyi lacks {name} (a binding of the built _crown)")
    for name in stale:
        print(f"note: _crown.pyi defines {name}, which this build of _crown lacks")
    if missing:
        print(f"python stub: {len(missing)} missing")
        return 1
    print(f"python stub: ok ({len(built)} bindings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
