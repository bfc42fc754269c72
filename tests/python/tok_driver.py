"""Shared helpers: the mlxcel_tok_driver process (JSON lines) and fixture paths."""
import base64
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(os.environ.get("MLXCEL_FIXTURES", REPO.parent / "shared" / "fixtures"))


def driver_path():
    build = pathlib.Path(os.environ.get("MLXCEL_BUILD_DIR", REPO / "build" / "cpu"))
    p = build / "tests" / "mlxcel_tok_driver"
    if not p.exists():
        pytest.skip(f"{p} not built (cmake --build --preset cpu)")
    return p


class Driver:
    def __init__(self):
        self.proc = subprocess.Popen([str(driver_path())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8", bufsize=1)

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "driver exited"
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
