"""`mlxcel pull / list / rm` and MODEL as a repo id, against a local server that speaks the
Hugging Face hub's download API (hub_server.py): full download, resume after a dropped
connection and after an interrupted run, sha256 mismatch refused, 401 and 404 explained, network
down, offline mode, reuse of a Hugging Face cache folder. References: the bytes the server holds
and Python's hashlib."""
import hashlib
import json
import os
import subprocess

import pytest

from _quant_util import CLI
from hub_server import Hub
import platform_fixtures

REPO = "test-org/tiny-model"


def payload(n, seed):
    h = hashlib.sha256(str(seed).encode()).digest()
    return (h * (n // len(h) + 1))[:n]


@pytest.fixture()
def hub():
    h = Hub()
    yield h
    h.stop()


@pytest.fixture()
def env(tmp_path, hub):
    e = dict(os.environ)
    for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "XDG_CACHE_HOME", "MLXCEL_MEMORY_LIMIT"):
        e.pop(k, None)
    e.update({"MLXCEL_CACHE_DIR": str(tmp_path / "store"), "HF_HOME": str(tmp_path / "hf"),
              "HF_ENDPOINT": hub.url, "HOME": str(tmp_path / "home")})
    return e


def run(env, *args, timeout=60):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def tiny_files(tmp_path):
    """A small model folder (config + header-only sparse shards would be holes; here real bytes)."""
    files = {"config.json": json.dumps(platform_fixtures.llama31_8b_config()).encode(),
             "tokenizer.json": b'{"model": {"type": "BPE"}}',
             "model.safetensors": payload(3 * 1024 * 1024 + 17, 1),
             "sub/extra.bin": payload(70000, 2)}
    return files


def assert_one_error(r, *needles):
    assert r.returncode != 0, r.stdout
    lines = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_full_download_list_resolve_rm(tmp_path, hub, env):
    files = tiny_files(tmp_path)
    hub.add(REPO, files, lfs={"model.safetensors"})
    r = run(env, "pull", REPO)
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "store" / "models" / REPO
    assert r.stdout.strip() == str(dest)
    for path, data in files.items():
        assert (dest / path).read_bytes() == data, path
    assert not list(dest.rglob("*.part")) and not (dest / ".incomplete").exists()
    api = hub.requests("/api/models/")
    assert api and "blobs=true" in api[0][1] and "/revision/main" in api[0][1]
    # A second pull fetches nothing.
    n = len(hub.requests("/resolve/"))
    assert run(env, "pull", REPO).returncode == 0
    assert len(hub.requests("/resolve/")) == n
    lst = json.loads(run(env, "list", "--json").stdout)
    assert [(m["repo"], m["source"], m["complete"]) for m in lst] == [(REPO, "mlxcel", True)]
    assert lst[0]["bytes"] >= sum(len(d) for d in files.values())
    # MODEL as a repo id resolves to the store (inspect's plan reads it; the shard is not a real
    # safetensors file, so the plan's error names that file inside the store).
    r = run(env, "generate", REPO, "-p", "hi", "--estimate-memory")
    assert str(dest) in r.stderr, r.stderr
    # rm: refuses without a terminal or --yes, then deletes.
    r = run(env, "rm", REPO)
    assert_one_error(r, "--yes")
    r = run(env, "rm", REPO, "--yes")
    assert r.returncode == 0 and not dest.exists()
    assert_one_error(run(env, "rm", REPO, "--yes"), "not in the mlxcel store")


def test_bare_name_means_mlx_community(tmp_path, hub, env):
    hub.add("mlx-community/Tiny-4bit", {"config.json": b"{}"})
    r = run(env, "pull", "Tiny-4bit")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "store/models/mlx-community/Tiny-4bit/config.json").exists()


def test_resume_after_dropped_connection(tmp_path, hub, env):
    files = tiny_files(tmp_path)
    hub.add(REPO, files, lfs={"model.safetensors"})
    hub.drop_once.add((REPO, "model.safetensors"))
    r = run(env, "pull", REPO, "-j", "1")
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "store/models" / REPO
    assert (dest / "model.safetensors").read_bytes() == files["model.safetensors"]
    gets = hub.requests("/resolve/main/model.safetensors")
    assert len(gets) == 2, gets
    half = len(files["model.safetensors"]) // 2
    assert gets[1][2].get("Range") == f"bytes={half}-", gets[1][2]


def test_resume_after_interrupted_run(tmp_path, hub, env):
    files = tiny_files(tmp_path)
    hub.add(REPO, files, lfs={"model.safetensors"})
    dest = tmp_path / "store/models" / REPO
    dest.mkdir(parents=True)
    have = 1000000
    (dest / "model.safetensors.part").write_bytes(files["model.safetensors"][:have])
    (dest / ".incomplete").write_text("main\n")
    listed = json.loads(run(env, "list", "--json").stdout)
    assert listed[0]["complete"] is False
    r = run(env, "pull", REPO)
    assert r.returncode == 0, r.stderr
    assert (dest / "model.safetensors").read_bytes() == files["model.safetensors"]
    gets = hub.requests("/resolve/main/model.safetensors")
    assert [g[2].get("Range") for g in gets] == [f"bytes={have}-"]


def test_checksum_mismatch_is_refused(tmp_path, hub, env):
    files = tiny_files(tmp_path)
    hub.add(REPO, files, lfs={"model.safetensors"})
    hub.corrupt.add((REPO, "model.safetensors"))
    r = run(env, "pull", REPO)
    assert_one_error(r, "checksum mismatch", "model.safetensors",
                     hashlib.sha256(files["model.safetensors"]).hexdigest())
    dest = tmp_path / "store/models" / REPO
    assert not (dest / "model.safetensors").exists()
    assert not (dest / "model.safetensors.part").exists()
    # Not a usable model: MODEL does not resolve to the half-pulled folder.
    assert_one_error(run(env, "inspect", REPO), "mlxcel pull " + REPO)


def test_401_explains_token(tmp_path, hub, env):
    hub.add(REPO, tiny_files(tmp_path))
    hub.token = "s3cret"
    r = run(env, "pull", REPO)
    assert_one_error(r, "401", "HF_TOKEN", "gated or private")
    env["HF_TOKEN"] = "s3cret"
    n = len(hub.log)
    r = run(env, "pull", REPO)
    assert r.returncode == 0, r.stderr
    sent = hub.log[n:]
    assert len(sent) == 5 and all(h.get("Authorization") == "Bearer s3cret" for _, _, h in sent)


def test_404_repo_and_revision(tmp_path, hub, env):
    hub.add(REPO, tiny_files(tmp_path))
    assert_one_error(run(env, "pull", "test-org/missing"), "404", "test-org/missing")
    assert_one_error(run(env, "pull", REPO, "--revision", "v9"), "404", "revision 'v9'")


def test_revision_is_fetched(tmp_path, hub, env):
    hub.add(REPO, {"config.json": b'{"v": 2}'}, rev="v2")
    r = run(env, "pull", REPO, "--revision", "v2")
    assert r.returncode == 0, r.stderr
    assert hub.requests("/resolve/v2/config.json")


def test_network_down_suggests_offline(tmp_path, env):
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # discard port: nothing listens
    assert_one_error(run(env, "pull", REPO), "cannot reach", "--offline")


def test_offline_mode(tmp_path, hub, env):
    hub.add(REPO, tiny_files(tmp_path))
    assert_one_error(run(env, "pull", REPO, "--offline"), "offline", "mlxcel pull")
    env2 = dict(env, HF_HUB_OFFLINE="1")
    assert_one_error(run(env2, "pull", REPO), "offline")
    assert run(env, "pull", REPO).returncode == 0
    n = len(hub.log)
    r = run(env2, "pull", REPO)
    assert r.returncode == 0 and r.stdout.strip().endswith(REPO)
    assert len(hub.log) == n  # no request in offline mode


def test_reuses_hf_cache(tmp_path, hub, env):
    commit = "a" * 40
    base = tmp_path / "hf/hub/models--test-org--tiny-model"
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(platform_fixtures.llama31_8b_config()))
    (base / "refs").mkdir()
    (base / "refs/main").write_text(commit)
    r = run(env, "pull", REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(snap)
    assert hub.log == []  # used in place, nothing downloaded
    lst = json.loads(run(env, "list", "--json").stdout)
    assert [(m["repo"], m["source"], m["path"]) for m in lst] == [(REPO, "hf cache", str(snap))]
    # MODEL as a repo id resolves to the snapshot (which has no weights here: the error names it).
    r = run(env, "inspect", REPO, "--memory-only")
    assert r.returncode != 0 and str(snap) in r.stderr, r.stderr
    # rm never deletes the HF cache.
    assert_one_error(run(env, "rm", REPO, "--yes"), "Hugging Face cache")
    assert snap.exists()


def test_not_downloaded_names_pull(tmp_path, env):
    assert_one_error(run(env, "inspect", "test-org/absent"), "mlxcel pull test-org/absent")
    assert_one_error(run(env, "pull", "bad/repo/id"), "repo id")


def test_not_enough_disk_space_is_refused_before_downloading(tmp_path, hub, env):
    files = tiny_files(tmp_path)
    hub.add(REPO, files)
    hub.listed_size[(REPO, "model.safetensors")] = 1 << 60  # more than any disk
    assert_one_error(run(env, "pull", REPO), "not enough disk space", "MLXCEL_CACHE_DIR")
    assert hub.requests("/resolve/") == []
