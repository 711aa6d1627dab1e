"""The package list, discovered so it cannot drift from the folders.

Each room (tpu_tools, jaxbench, subagents, server, clients) installs as maxkernel.<room>, by pyproject's
[tool.setuptools] package-dir. setuptools' own `packages.find` cannot apply that mapping (it names what it
finds from the `where` folder down, so tpu_tools/cli would install as a top-level `tpu_tools.cli`), so this
file finds each room's packages and prefixes them. A folder whose name is not an identifier (the jaxbench
task folders) is data, loaded by path and shipped by package-data.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def discovered_packages(root: Path = HERE) -> list[str]:
    """maxkernel.<room>[.<sub>...] for every folder with an __init__.py under each mapped room."""
    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out = []
    for name, folder in sorted(package_dir.items()):
        subs = find_packages(str(root / folder))
        out += [name] + [f"{name}.{s}" for s in subs if all(p.isidentifier() for p in s.split("."))]
    return out


if __name__ == "__main__":
    setup(packages=discovered_packages())
