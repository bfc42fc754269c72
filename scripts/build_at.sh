#!/usr/bin/env bash
# Build the cpu preset of a git revision into OUTDIR (for scripts/refactor_parity.py: the binary
# from before a refactor next to the one after it).
#   usage: scripts/build_at.sh REV OUTDIR [JOBS]
# The revision is checked out with `git worktree add --detach` in a temporary folder (the current
# checkout is not touched), configured with `cmake --preset cpu`, built, and OUTDIR receives the
# build tree's bin/ (mlxcel, mlxcel-server, ...). The worktree is removed afterwards.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 REV OUTDIR [JOBS]" >&2
  exit 2
fi
rev=$1
out=$2
jobs=${3:-2}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
sha=$(git -C "$repo" rev-parse --verify "$rev^{commit}")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlxcel-build-at.XXXXXX")
cleanup() {
  git -C "$repo" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach "$tmp/src" "$sha" >/dev/null
(cd "$tmp/src" && cmake --preset cpu >"$tmp/configure.log" 2>&1) || { tail -30 "$tmp/configure.log" >&2; exit 1; }
(cd "$tmp/src" && cmake --build --preset cpu -j "$jobs" --target mlxcel >"$tmp/build.log" 2>&1) ||
  { tail -40 "$tmp/build.log" >&2; exit 1; }
bin=$(find "$tmp/src/build" -type f -name mlxcel -perm -u+x | head -1)
[[ -n "$bin" ]] || { echo "build_at: no mlxcel binary under $tmp/src/build" >&2; exit 1; }
mkdir -p "$out"
cp -a "$(dirname "$bin")"/. "$out"/
echo "$sha" >"$out/REVISION"
echo "built $rev ($sha) -> $out/$(basename "$bin")"
