import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# Server fixtures (tests/python/test_server_*.py): one tiny model and one server per session.
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def server_model_dir(tmp_path_factory):
    import server_model
    return server_model.make(tmp_path_factory.mktemp("server-model") / "tiny-qwen3")


@pytest.fixture(scope="session")
def server(server_model_dir, tmp_path_factory):
    from _server_util import SERVER_ARGS, ServerProc
    srv = ServerProc(server_model_dir, SERVER_ARGS, tmp_path_factory.mktemp("server-log") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def reference(server_model_dir):
    from _server_util import Reference
    return Reference(server_model_dir)


@pytest.fixture(scope="session")
def all_fixtures(tmp_path_factory):
    """Every fixture of scripts/make_fixtures.py, built once per session with mlx-lm; or, when
    MLXCEL_FIXTURES_DIR names a folder, the fixtures make_fixtures.py already wrote there (to
    run a few tests without rebuilding all fixtures)."""
    import os
    import subprocess
    if os.environ.get("MLXCEL_FIXTURES_DIR"):
        return pathlib.Path(os.environ["MLXCEL_FIXTURES_DIR"])
    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path_factory.mktemp("fixtures")
    r = subprocess.run([sys.executable, str(root / "scripts" / "make_fixtures.py"), str(out)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return out
