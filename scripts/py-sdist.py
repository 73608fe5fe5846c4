#!/usr/bin/env python3
"""`make py/sdist` (and `make release`): the Python client's source archive.

Writes dispatcher_client-<version>.tar.gz into OUT_DIR: clients/python's
pyproject.toml, README.md and the dispatcher_client package under one
dispatcher_client-<version>/ directory, with a PKG-INFO (core metadata 2.1),
as an sdist is laid out (pip installs it: pip install dispatcher_client-....tar.gz).
Built with the standard library only (tarfile), because a release is built
where no package index may be reachable, so `python -m build` and its
setuptools download are not an option.

The version is set in the packed copy only (pyproject.toml, PKG-INFO and
dispatcher_client.__version__); the committed files keep 0.0.0. A semver
pre-release is spelled as PEP 440 wants it: 1.2.0-rc.1 -> 1.2.0rc1,
-alpha.N -> aN, -beta.N -> bN, anything else a local version
(0.0.0-ci -> 0.0.0+ci).

usage: scripts/py-sdist.py OUT_DIR VERSION   (VERSION as the git tag: vX.Y.Z[-pre])
"""

import gzip
import io
import os
import re
import sys
import tarfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PKG_DIR = os.path.join(ROOT, "clients", "python")
SEMVER = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?$")
# Reproducible archives: every member gets this time (2000-01-01), not the
# checkout's file times, so the same commit packs to the same bytes.
MTIME = 946684800


def pep440(version: str) -> str:
    m = SEMVER.match(version)
    if not m:
        raise SystemExit(f"py-sdist: VERSION must be vMAJOR.MINOR.PATCH[-pre], got {version!r}")
    base = ".".join(m.group(1, 2, 3))
    pre = m.group(4)
    if not pre:
        return base
    known = re.match(r"^(alpha|a|beta|b|rc)\.?(\d+)$", pre)
    if known:
        tag = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "rc": "rc"}[known.group(1)]
        return f"{base}{tag}{known.group(2)}"
    return base + "+" + re.sub(r"[^0-9A-Za-z]+", ".", pre).strip(".").lower()


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    out_dir, version = sys.argv[1], pep440(sys.argv[2])

    with open(os.path.join(PKG_DIR, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    project = {}  # the few [project] strings needed (tomllib is 3.11+; the OS python3 may be older)
    for key in ("name", "description", "requires-python"):
        m = re.search(rf'(?m)^{re.escape(key)} = "([^"]*)"$', pyproject)
        if not m:
            raise SystemExit(f"py-sdist: clients/python/pyproject.toml has no {key} = \"...\" line")
        project[key] = m.group(1)
    name = project["name"]
    dist_name = re.sub(r"[-_.]+", "_", name).lower()  # PEP 625's file name
    top = f"{dist_name}-{version}"

    pyproject, n = re.subn(r'(?m)^version = "[^"]*"$', f'version = "{version}"', pyproject, count=1)
    if n != 1:
        raise SystemExit("py-sdist: clients/python/pyproject.toml has no version = \"...\" line")

    with open(os.path.join(PKG_DIR, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    pkg_info = "".join(
        [
            "Metadata-Version: 2.1\n",
            f"Name: {name}\n",
            f"Version: {version}\n",
            f"Summary: {project['description']}\n",
            f"Requires-Python: {project['requires-python']}\n",
            "Description-Content-Type: text/markdown\n",
            "\n",
            readme,
        ]
    )

    files: dict[str, bytes] = {
        "PKG-INFO": pkg_info.encode(),
        "pyproject.toml": pyproject.encode(),
        "README.md": readme.encode(),
    }
    src = os.path.join(PKG_DIR, "dispatcher_client")
    for entry in sorted(os.listdir(src)):
        if not entry.endswith(".py"):
            continue
        with open(os.path.join(src, entry), "rb") as f:
            data = f.read()
        if entry == "__init__.py":
            data, n = re.subn(rb'(?m)^__version__ = "[^"]*"$', f'__version__ = "{version}"'.encode(), data, count=1)
            if n != 1:
                raise SystemExit("py-sdist: dispatcher_client/__init__.py has no __version__ = \"...\" line")
        files[f"dispatcher_client/{entry}"] = data

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{top}.tar.gz")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirname in (top, f"{top}/dispatcher_client"):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
            tar.addfile(info)
        for rel in sorted(files):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(files[rel]), 0o644, MTIME
            tar.addfile(info, io.BytesIO(files[rel]))
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", filename="", mtime=MTIME) as gz:
        gz.write(buf.getvalue())
    print(os.path.basename(path))


if __name__ == "__main__":
    main()
