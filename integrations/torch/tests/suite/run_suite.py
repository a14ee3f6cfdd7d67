#!/usr/bin/env python3
"""Runs PyTorch's own distributed test suite (distributed_test.py's
_DistTestBase, CPU tests) with backend "kizuna" and with "gloo", under each
torch found, for each world size, and fails when kizuna fails a test that
Gloo passes unless expected.json says why (issue 37). README.md beside this
file explains the choices; suite_shard.py runs one configuration.

Exit status: 0 when kizuna passes every test Gloo passes (or the list says
why not); 1 otherwise; 77 (skipped) when no torch to run the suite under is
found, or no configuration could be run, with the reason printed; 2 for a
usage error.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARD = os.path.join(HERE, "suite_shard.py")
EXPECTED = os.path.join(HERE, "expected.json")
BASELINE = os.path.join(HERE, "gloo_baseline.json")
SKIP_RC = 77
STATUSES = ("passed", "failed", "skipped", "hung")


def parse_args():
    p = argparse.ArgumentParser(
        description="PyTorch's distributed test suite, CPU tests, kizuna against Gloo.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--build-dir", default=os.environ.get("KIZUNA_BUILD_DIR", os.path.join(SOURCE_ROOT, "build")),
                   help="kizuna's build folder: the plugins' default location; results go to <build>/torch-suite")
    p.add_argument("--out", help="results folder (default <build-dir>/torch-suite)")
    p.add_argument("--torch-python", default=os.environ.get("KIZUNA_TORCH_PYTHON", "/usr/bin/python3"),
                   help="interpreter of the \"torch\" flavour (Debian's torch 1.13)")
    p.add_argument("--torch-plugin", default=os.environ.get("KIZUNA_TORCH_PLUGIN_DIR"),
                   help="folder holding its kizuna_torch package (default <build>/integrations/torch/python)")
    p.add_argument("--torch2-python",
                   default=os.environ.get("KIZUNA_TORCH2_PYTHON", os.path.join(SOURCE_ROOT, ".venv-torch", "bin", "python")),
                   help="interpreter of the \"torch2\" flavour (torch 2.x in the project's venv)")
    p.add_argument("--torch2-plugin", default=os.environ.get("KIZUNA_TORCH2_PLUGIN_DIR"),
                   help="folder holding its kizuna_torch package (default <build>/integrations/torch/python-torch2)")
    p.add_argument("--flavours", nargs="+", default=["torch", "torch2"], choices=["torch", "torch2"])
    p.add_argument("--world-sizes", nargs="+", type=int, default=[2, 3])
    p.add_argument("--gloo", choices=["baseline", "run", "update"], default="baseline",
                   help="baseline: take Gloo's results from gloo_baseline.json, and run Gloo only for a "
                        "torch version or world size it lacks (default); run: run Gloo too; "
                        "update: run Gloo and rewrite gloo_baseline.json with its results")
    p.add_argument("--no-kizuna", action="store_true", help="run Gloo only (with --gloo run or update)")
    p.add_argument("--timeout", type=int, default=30,
                   help="seconds one test may take before it is killed and reported as hung (default 30)")
    p.add_argument("--tests", default="", help="regular expression: run only the tests it finds")
    return p.parse_args()


def probe(python):
    """(torch version, None) of `python`, or (None, reason)."""
    if not python:
        return None, "no interpreter given (--torch-python / --torch2-python)"
    if not os.path.exists(python):
        return None, f"{python} does not exist"
    try:
        r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, f"{python} took over 120 s to import torch"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{python} cannot import torch: {last}"
    return r.stdout.strip().splitlines()[-1], None


def minor(version):
    """'1.13.0a0' -> '1.13'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def plugin_ok(python, plugin_dir):
    """None when kizuna_torch imports from `plugin_dir` under `python`, else why not."""
    if not plugin_dir or not os.path.isdir(os.path.join(plugin_dir, "kizuna_torch")):
        return f"no kizuna_torch package in {plugin_dir} (build the plugin for this torch)"
    env = dict(os.environ, PYTHONPATH=plugin_dir)
    r = subprocess.run([python, "-c", "import kizuna_torch"], capture_output=True, text=True, env=env,
                       timeout=120)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"kizuna_torch from {plugin_dir} does not import: {last}"
    return None


def read_jsonl(path):
    recs = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    recs.append(json.loads(line))
    return recs


def run_config(python, plugin_dir, backend, world_size, args, out_dir):
    """Runs one (torch, backend, world size) through suite_shard.py; returns
    ({test: record}, wall seconds, meta, error): error is None, or why the
    shard could not run the suite (the last line of its log). A shard that stops making progress (no
    test finished within the per-test limit plus a margin) is killed, its
    current test reported as hung, and a new shard goes on after it."""
    tag = f"{backend}-ws{world_size}"
    jsonl = os.path.join(out_dir, tag + ".jsonl")
    log_path = os.path.join(out_dir, tag + ".log")
    for path in (jsonl, jsonl + ".current", jsonl + ".done"):
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ)
    if backend == "kizuna":
        env["PYTHONPATH"] = plugin_dir + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [python, SHARD, "--backend", backend, "--world-size", str(world_size),
           "--timeout", str(args.timeout), "--out", jsonl, "--skip", jsonl + ".done"]
    if args.tests:
        cmd += ["--tests", args.tests]
    stall_limit = args.timeout + 60
    start = time.monotonic()
    error = None
    with open(log_path, "w") as log:
        while True:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=out_dir, start_new_session=True)
            seen, last_progress = len(read_jsonl(jsonl)), time.monotonic()
            while proc.poll() is None:
                time.sleep(0.5)
                n = len(read_jsonl(jsonl))
                if n != seen:
                    seen, last_progress = n, time.monotonic()
                elif time.monotonic() - last_progress > stall_limit:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                    break
            recs = read_jsonl(jsonl)
            if proc.returncode == 0:
                break
            # The shard died or stalled: blame the test it was in, go on after it.
            current = open(jsonl + ".current").read().strip() if os.path.exists(jsonl + ".current") else ""
            if not current or any(r.get("test") == current for r in recs):
                log.flush()
                with open(log_path) as f:
                    lines = [l.strip() for l in f if l.strip()]
                error = f"exit {proc.returncode} outside a test: {lines[-1] if lines else '(no output)'}"
                log.write(f"\n[run_suite] shard {error}\n")
                break
            status = "hung" if proc.returncode == -9 else "failed"
            msg = (f"the shard stalled for {stall_limit} s in this test and was killed" if status == "hung"
                   else f"the shard process died in this test (exit {proc.returncode})")
            with open(jsonl, "a") as f:
                f.write(json.dumps({"test": current, "status": status, "seconds": None, "message": msg}) + "\n")
            log.write(f"\n[run_suite] {current}: {msg}; restarting after it\n")
            log.flush()
            with open(jsonl + ".done", "w") as f:
                f.write("\n".join(r["test"] for r in read_jsonl(jsonl) if "test" in r))
    wall = time.monotonic() - start
    results = {r["test"]: r for r in read_jsonl(jsonl) if "test" in r}
    meta = next((r["meta"] for r in read_jsonl(jsonl) if "meta" in r), {})
    return results, wall, meta, error


def counts(results):
    c = {s: 0 for s in STATUSES}
    for r in results.values():
        c[r["status"]] += 1
    return c


def load_expected():
    with open(EXPECTED) as f:
        return json.load(f)


def torch_file(python, rel):
    r = subprocess.run([python, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"],
                       capture_output=True, text=True)
    return os.path.join(os.path.dirname(r.stdout.strip()), rel)


def allowed_failures(expected, version, world_size, python):
    """{test: reason} for this torch and world size, each entry's quoted
    torch line checked against the torch installed; plus the entries whose
    quote was not found (which then allow nothing)."""
    allowed, stale = {}, []
    for e in expected["allowed"]:
        if e["torch"] != minor(version) or world_size not in e["world_sizes"]:
            continue
        path = torch_file(python, e["torch_source"]["file"])
        text = open(path).read() if os.path.exists(path) else ""
        if e["torch_source"]["line"] not in text:
            stale.append(f"{e['test']}: '{e['torch_source']['line']}' not found in {path}")
            continue
        allowed[e["test"]] = e["reason"]
    return allowed, stale


def main():
    args = parse_args()
    out_root = args.out or os.path.join(args.build_dir, "torch-suite")
    os.makedirs(out_root, exist_ok=True)
    plugins = {
        "torch": args.torch_plugin or os.path.join(args.build_dir, "integrations", "torch", "python"),
        "torch2": args.torch2_plugin or os.path.join(args.build_dir, "integrations", "torch", "python-torch2"),
    }
    pythons = {"torch": args.torch_python, "torch2": args.torch2_python}
    expected = load_expected()
    baseline = json.load(open(BASELINE)) if os.path.exists(BASELINE) else {}
    rows, problems, notes, skipped = [], [], [], []
    ran_kizuna = False
    t0 = time.monotonic()

    for flavour in args.flavours:
        python = pythons[flavour]
        version, why = probe(python)
        if version is None:
            print(f"{flavour}: skipped: {why}")
            skipped.append(f"{flavour}: {why}")
            continue
        kizuna_why = "--no-kizuna" if args.no_kizuna else plugin_ok(python, plugins[flavour])
        if kizuna_why and not args.no_kizuna:
            print(f"{flavour} (torch {version}): kizuna skipped: {kizuna_why}")
            skipped.append(f"{flavour} (torch {version}): kizuna: {kizuna_why}")
        frep = {"python": python, "torch": version, "plugin": plugins[flavour],
                "kizuna_skipped": kizuna_why, "timeout_s": args.timeout, "gloo": args.gloo,
                "configs": {}, "problems": [], "notes": []}
        first_problem, first_note = len(problems), len(notes)
        for ws in args.world_sizes:
            out_dir = os.path.join(out_root, flavour, f"ws{ws}")
            os.makedirs(out_dir, exist_ok=True)
            key = f"torch {version}"
            base = baseline.get(key, {}).get(str(ws))
            run_gloo = args.gloo in ("run", "update") or base is None
            results = {}
            if run_gloo:
                if args.gloo == "baseline":
                    notes.append(f"{flavour} ws{ws}: gloo_baseline.json has no '{key}' world size {ws}: "
                                 "running Gloo (--gloo update records it)")
                res, wall, meta, error = run_config(python, None, "gloo", ws, args, out_dir)
                results["gloo"] = res
                if error:
                    problems.append(f"{flavour} (torch {version}) ws{ws}: gloo: {error}")
                rows.append((flavour, version, "gloo", ws, counts(res), wall))
                frep["configs"][f"gloo-ws{ws}"] = {"wall_s": round(wall, 1), "meta": meta, "tests": res}
                if args.gloo == "update" and not args.tests:
                    baseline.setdefault(key, {})[str(ws)] = {t: r["status"] for t, r in sorted(res.items())}
            else:
                results["gloo"] = {t: {"test": t, "status": s} for t, s in base.items()
                                   if not args.tests or re.search(args.tests, t)}
                frep["configs"][f"gloo-ws{ws}"] = {"baseline": BASELINE, "tests": results["gloo"]}
                rows.append((flavour, version, "gloo (baseline)", ws, counts(results["gloo"]), None))
            if kizuna_why:
                continue
            res, wall, meta, error = run_config(python, plugins[flavour], "kizuna", ws, args, out_dir)
            results["kizuna"] = res
            ran_kizuna = True
            rows.append((flavour, version, "kizuna", ws, counts(res), wall))
            frep["configs"][f"kizuna-ws{ws}"] = {"wall_s": round(wall, 1), "meta": meta, "tests": res}
            if error:
                problems.append(f"{flavour} (torch {version}) ws{ws}: kizuna: {error}")
                if not res:
                    continue

            allowed, stale = allowed_failures(expected, version, ws, python)
            for s in stale:
                notes.append(f"{flavour} ws{ws}: expected.json entry no longer applies: {s}")
            for test, g in sorted(results["gloo"].items()):
                k = res.get(test)
                if g["status"] != "passed" or (k and k["status"] == "passed"):
                    continue
                kstat = k["status"] if k else "not run"
                kmsg = k.get("message", "") if k else ""
                if test in allowed:
                    notes.append(f"{flavour} ws{ws}: {test}: {kstat}, allowed: {allowed[test]}")
                else:
                    problems.append(f"{flavour} (torch {version}) ws{ws}: {test}: {kstat}: {kmsg}")
            for test in sorted(allowed):
                if res.get(test, {}).get("status") == "passed":
                    notes.append(f"{flavour} ws{ws}: {test} passes now: its expected.json entry can go")
        frep["problems"] = problems[first_problem:]
        frep["notes"] = notes[first_note:]
        flavour_dir = os.path.join(out_root, flavour)
        os.makedirs(flavour_dir, exist_ok=True)
        with open(os.path.join(flavour_dir, "results.json"), "w") as f:
            json.dump(frep, f, indent=1)
        print(f"{flavour}: per-test results in {os.path.join(flavour_dir, 'results.json')}")

    if args.gloo == "update" and not args.tests:
        with open(BASELINE, "w") as f:
            json.dump(baseline, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {BASELINE}")

    total = time.monotonic() - t0
    print()
    print(f"{'flavour':8s} {'torch':16s} {'backend':16s} {'ws':>3s} {'passed':>7s} {'failed':>7s} "
          f"{'skipped':>7s} {'hung':>5s} {'wall s':>7s}")
    for flavour, version, backend, ws, c, wall in rows:
        w = f"{wall:7.0f}" if wall is not None else "      -"
        print(f"{flavour:8s} {version:16s} {backend:16s} {ws:3d} {c['passed']:7d} {c['failed']:7d} "
              f"{c['skipped']:7d} {c['hung']:5d} {w}")
    for n in notes:
        print("note:", n)
    for p in problems:
        print("FAIL:", p)
    print(f"total {total:.0f} s")

    if not ran_kizuna and not args.no_kizuna:
        print("skipped: kizuna was not run: " + "; ".join(skipped))
        return SKIP_RC
    if not rows:
        print("skipped: " + "; ".join(skipped))
        return SKIP_RC
    # Tests kizuna passed, and tests Gloo passes that kizuna fails without a reason listed.
    passed = sum(r[4]["passed"] for r in rows if r[2] == "kizuna")
    print(f"suite: {passed} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
