"""Print a pip constraints file that pins every dependency of pyproject.toml (the core ones and
those of the extras that `dev` pulls) at its declared minimum: `>=X` -> `==X`, `==X` kept.
Used by the lower-bounds job of .ci/run, which installs with it and runs the tests."""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml").read_text())["project"]
extras = project.get("optional-dependencies", {})
reqs = list(project["dependencies"])
for req in extras.get("dev", []):
    m = re.fullmatch(rf"{project['name']}\[(.*)\]", req.strip())
    reqs += [r for x in m.group(1).split(",") for r in extras[x.strip()]] if m else [req]
pins = {}
for req in reqs:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(?:>=|==)\s*([^,;\s]+)\s*", req)
    if not m:
        sys.exit(f"{req!r}: no `>=X` / `==X` floor to pin (every dependency must declare one)")
    name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
    pins[name] = max(pins.get(name, m.group(2)), m.group(2), key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))
print("\n".join(f"{n}=={v}" for n, v in sorted(pins.items())))
