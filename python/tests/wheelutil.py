"""A minimal pure-Python wheel, built with zipfile: what ETL dependency tests install with pip
from a local path (no package index needed). Used by python/tests/test_jobs_etl.py and, as a
script, by the Rust ETL tests:

    python3 wheelutil.py DIR PACKAGE MODULE_SOURCE   # prints the wheel's path
"""

import base64
import hashlib
import os
import sys
import zipfile


def make_wheel(directory: str, package: str, source: str) -> str:
    """Writes ``<package>-1.0-py3-none-any.whl`` holding ``<package>/__init__.py`` = ``source``
    into ``directory``; returns its path."""
    info = f"{package}-1.0.dist-info"
    files = {
        f"{package}/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: gristmill-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = os.path.join(directory, f"{package}-1.0-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


if __name__ == "__main__":
    print(make_wheel(sys.argv[1], sys.argv[2], sys.argv[3]))
