#!/usr/bin/env python3
"""Per-kernel GPU resource usage of the ROCm build, for each gfx target.

Re-runs the device-side compilation of every src/backend/gpu/*.cu file from the build's
compile_commands.json, once per --offload-arch target, with -Rpass-analysis=kernel-resource-usage,
and prints a table (VGPRs, SGPRs, LDS, scratch, spills, occupancy). Kernels listed in the --hot
file (one substring of the demangled name per line, '#' comments) must not spill or use scratch:
the script exits 1 if one does, or if a hot kernel is missing for a target.

usage: rocm_resources.py BUILD_DIR [--hot FILE] [--markdown OUT.md]
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

FIELDS = {
    "SGPRs": "sgpr", "VGPRs": "vgpr", "AGPRs": "agpr",
    "ScratchSize [bytes/lane]": "scratch", "Dynamic Stack": "dyn_stack",
    "Occupancy [waves/SIMD]": "occupancy", "SGPRs Spill": "sgpr_spill",
    "VGPRs Spill": "vgpr_spill", "LDS Size [bytes/block]": "lds",
}


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def device_command(entry, arch):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith("--offload-arch=") or a == "-c":
            continue
        out.append(a)
    return out + [f"--offload-arch={arch}", "--cuda-device-only", "-S", "-o", os.devnull,
                  "-Rpass-analysis=kernel-resource-usage"]


def parse_remarks(text):
    kernels, cur = [], None
    for line in text.splitlines():
        m = re.search(r"remark: Function Name: (\S+)", line)
        if m:
            cur = {"name": m.group(1)}
            kernels.append(cur)
            continue
        m = re.search(r"remark:\s+([A-Za-z][^:]*?): (\S+)", line)
        if m and cur is not None and m.group(1) in FIELDS:
            v = m.group(2)
            cur[FIELDS[m.group(1)]] = v if not v.lstrip("-").isdigit() else int(v)
    return kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--hot", help="file listing hot kernels (substrings of demangled names)")
    ap.add_argument("--markdown", help="also write the table as markdown to this file")
    a = ap.parse_args()

    cache = open(os.path.join(a.build_dir, "CMakeCache.txt")).read()
    m = re.search(r"^MLXCEL_ROCM_ARCHITECTURES:\w+=(.*)$", cache, re.M)
    archs = [x for x in m.group(1).split(";") if x] if m else []
    entries = [e for e in json.load(open(os.path.join(a.build_dir, "compile_commands.json")))
               if "/src/backend/gpu/" in e["file"] and e["file"].endswith(".cu")]
    if not entries or not archs:
        print("no GPU sources or targets in", a.build_dir)
        return 1

    jobs = [(e, arch) for e in entries for arch in archs]

    def run(job):
        e, arch = job
        p = subprocess.run(device_command(e, arch), cwd=e["directory"], capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise SystemExit(f"device compile failed for {e['file']} {arch}:\n{p.stderr}")
        return e["file"], arch, parse_remarks(p.stderr)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        results = list(ex.map(run, jobs))

    names = sorted({k["name"] for _, _, ks in results for k in ks})
    pretty = demangle(names)
    hot = []
    if a.hot:
        for line in open(a.hot):
            line = line.split("#", 1)[0].strip()
            if line:
                hot.append(line)

    rows = []
    for f, arch, ks in results:
        for k in ks:
            full = pretty.get(k["name"], k["name"])
            short = full.replace("(anonymous namespace)::", "").replace("mlxcel::", "")
            short = re.sub(r"^void ", "", short.split("(")[0])
            k["pretty"] = short
            k["arch"] = arch
            k["file"] = os.path.relpath(f, os.path.dirname(os.path.abspath(a.build_dir.rstrip("/"))) + "/..")
            k["hot"] = any(h in k["pretty"] for h in hot)
            rows.append(k)
    rows.sort(key=lambda k: (k["arch"], not k["hot"], k["pretty"]))

    header = ["target", "kernel", "hot", "VGPR", "SGPR", "LDS B", "scratch B/lane", "VGPR spill",
              "SGPR spill", "occupancy"]
    table = [[k["arch"], k["pretty"][:90], "yes" if k["hot"] else "", k.get("vgpr", "?"),
              k.get("sgpr", "?"), k.get("lds", "?"), k.get("scratch", "?"),
              k.get("vgpr_spill", "?"), k.get("sgpr_spill", "?"), k.get("occupancy", "?")]
             for k in rows]
    widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    print(fmt.format(*header))
    for r in table:
        print(fmt.format(*[str(x) for x in r]))
    if a.markdown:
        with open(a.markdown, "w") as md:
            md.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
            for r in table:
                md.write("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |\n")

    bad = []
    for h in hot:
        for arch in archs:
            if not any(h in k["pretty"] and k["arch"] == arch for k in rows):
                bad.append(f"hot kernel '{h}' not found for {arch}")
    for k in rows:
        if k["hot"] and (k.get("vgpr_spill", 0) or k.get("sgpr_spill", 0) or k.get("scratch", 0)):
            bad.append(f"hot kernel spills on {k['arch']}: {k['pretty']} (VGPR spill "
                       f"{k.get('vgpr_spill')}, SGPR spill {k.get('sgpr_spill')}, scratch "
                       f"{k.get('scratch')} B/lane)")
    print(f"\n{len(rows)} kernel builds over {len(archs)} targets; {sum(k['hot'] for k in rows)} hot")
    for b in bad:
        print("ERROR:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
