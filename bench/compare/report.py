#!/usr/bin/python3
"""bench/compare/report.py: turns the result files of scripts/bench.sh and
scripts/bench_compare.sh into a generated section of a markdown report
(and, for the comparison, gnuplot PNGs). The scripts write the report into
the results folder in the build directory (DIR/report.md, DIR/plots/);
`make bench-doc` writes the comparison into docs/performance.md and
docs/plots/.

    report.py bench   --results DIR --doc DIR/report.md --command CMD
    report.py compare --results DIR --doc DIR/report.md --plots DIR/plots --command CMD
    report.py stamp   --results DIR   (when the measurement starts: the date, machine and revision)

Input (DIR):
    <config>-n<world>-r<rep>.json   kizuna-perf / gloo-perf / mpi-perf --json output
    memory-r<rep>.json              bench_reduce --benchmark_format=json (memcpy, reduce float32)
    memory-p<p>-r<rep>-c<k>.json    the same, process k of p run at once (p = min(ranks, cores))
    tcp-ring-n<world>-r<rep>.txt    tcp-ring-rate output, kizuna's congestion control, 1 MiB blocks
    tcp-stream-n<world>-r<rep>.txt  the same with blocks of the largest size (when measured)
    tcp-system-n<world>-r<rep>.txt  the system's congestion control, 1 MiB blocks (when it differs)
    tcp-congestion.txt              the system's congestion control (its name)
    measured.txt                    report.py stamp's line (else the report's own time and revision)
Every figure is a median over the repetitions <rep>; the spread shown is
half the range (max - min) over the repetitions, relative to the median.

Each section sits between its own marker comments; a rerun replaces that
section only and leaves the rest of the file alone (a missing section is
appended at the end).
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys

# Configurations of the comparison, in table order: (file label, column title, transport group).
COMPARE_CONFIGS = [
    ("kizuna-shm-auto", "kizuna shm auto", "shm"),
    ("kizuna-shm-symmetric", "kizuna shm symmetric", "shm"),
    ("kizuna-shm-ring", "kizuna shm ring", "shm"),
    ("kizuna-shm-tree", "kizuna shm tree", "shm"),
    ("mpi-shm", "Open MPI shm", "shm"),
    ("kizuna-tcp-auto", "kizuna tcp auto", "tcp"),
    ("kizuna-tcp-ring", "kizuna tcp ring", "tcp"),
    ("kizuna-tcp-tree", "kizuna tcp tree", "tcp"),
    ("gloo-ring", "Gloo ring", "tcp"),
    ("gloo-ring_chunked", "Gloo ring_chunked", "tcp"),
    ("gloo-halving_doubling", "Gloo halving_doubling", "tcp"),
    ("gloo-bcube", "Gloo bcube", "tcp"),
    ("mpi-tcp", "Open MPI tcp", "tcp"),
]
GLOO = ["gloo-ring", "gloo-ring_chunked", "gloo-halving_doubling", "gloo-bcube"]
KIB, MIB = 1 << 10, 1 << 20


def human_size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def median_spread(values):
    """Median and half the range relative to it (a fraction)."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    m = statistics.median(values)
    spread = (max(values) - min(values)) / 2 / m if m else 0.0
    return m, spread


def spread_note(spread):
    """", ±N%" for a spread of 1% or more, else nothing."""
    return f", ±{spread * 100:.0f}%" if spread and spread >= 0.01 else ""


def number(value, kind):
    """busbw with three significant figures (0.00123, 0.0456, 1.23, 12.3); times in us
    with 2 decimals below 10, 1 below 100, none above."""
    if kind == "busbw":
        if value >= 10:
            return f"{value:.1f}"
        if value >= 1:
            return f"{value:.2f}"
        if value >= 0.1:
            return f"{value:.3f}"
        if value >= 0.01:
            return f"{value:.4f}"
        return f"{value:.2g}" if value else "0"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt(value, spread, kind="busbw"):
    if value is None:
        return "n/a"
    text = number(value, kind)
    if spread is not None and spread >= 0.01:
        text += f" ±{spread * 100:.0f}%"
    return text


def load_runs(results, pattern):
    """{(label, world): [json doc per repetition]} for files matching pattern (a doc
    per sweep where a repetition has several); each doc gets "rep", the pattern's
    group of that name."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        m = re.fullmatch(pattern, os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            doc = json.load(f)
        doc["rep"] = int(m.group("rep"))
        runs.setdefault((m.group("label"), int(m.group("world"))), []).append(doc)
    return runs


def repetitions(runs):
    return len({doc["rep"] for docs in runs.values() for doc in docs})


def series(docs, placement, field):
    """{size: [value per repetition]} of one configuration."""
    out = {}
    for doc in docs:
        for row in doc["results"]:
            m = row.get(placement)
            if m is None:
                continue
            out.setdefault(row["size"], []).append(m[field])
    return out


def stats(docs, placement, field):
    return {size: median_spread(vals) for size, vals in series(docs, placement, field).items()}


def total_wrong(runs):
    return sum(doc.get("wrong", 0) for docs in runs.values() for doc in docs)


def replace_section(doc_path, name, body):
    begin = f"<!-- BEGIN {name} (generated; a rerun replaces everything up to the END marker) -->"
    end = f"<!-- END {name} -->"
    text = open(doc_path).read() if os.path.exists(doc_path) else ""
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    pattern = re.compile(re.escape(f"<!-- BEGIN {name} ") + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    elif text.strip():
        text = text.rstrip("\n") + "\n\n" + block
    else:
        text = block  # a new report
    with open(doc_path, "w") as f:
        f.write(text)


def measured_on(results):
    """'measured on 2 CPUs (...), kizuna built from REV': the stamp without its date and time, which
    stay in DIR/measured.txt (a report says what was measured, not when)."""
    return "measured on " + re.sub(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}, ", "", machine_line(results))


def machine_line(results=None):
    """Date, machine and the revision kizuna was built from: as stamped in `results` when the
    measurement started, else now."""
    stamped = os.path.join(results, "measured.txt") if results else None
    if stamped and os.path.exists(stamped):
        with open(stamped) as f:
            return f.read().strip()
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=False).stdout.strip()
    except OSError:
        rev = ""
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "include", "kernels"],
                               capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        dirty = ""
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (f"{date}, {os.cpu_count()} CPUs ({cpu}), kizuna built from {rev or 'an unknown revision'}"
            + (" with uncommitted changes to its sources" if dirty else ""))


# ---------------------------------------------------------------- make bench

def bench(args):
    runs = load_runs(args.results, r"kizuna-(?P<label>[a-z_]+)-n(?P<world>\d+)-r(?P<rep>\d+)\.json")
    if not runs:
        sys.exit("report.py: no kizuna-perf results in " + args.results)
    worlds = sorted({w for _, w in runs})
    collectives = [c for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
                   if any(label == c for label, _ in runs)]
    reps = repetitions(runs)
    any_doc = next(iter(runs.values()))[0]
    lines = [
        "## kizuna-perf tables (`make bench`)",
        "",
        f"Command: `{args.command}`; {measured_on(args.results)}.",
        "",
        f"kizuna-perf per collective and world size, ranks as processes, float32 (sum where it "
        f"applies), algorithm and transport as kizuna chooses them (auto), -n {any_doc['iters']} "
        f"-w {any_doc['warmup']}, every result checked. Figures are medians of {reps} runs "
        f"(± half their range where it is 1% or more). Time in us, busbw in GB/s "
        f"(nccl-tests' definition).",
        "",
    ]
    for c in collectives:
        lines += [f"### {c}", ""]
        header = "| size |"
        rule = "|---|"
        for w in worlds:
            header += f" {w} ranks: time out-of-place | busbw | time in-place | busbw |"
            rule += "---|---|---|---|"
        lines += [header, rule]
        sizes = sorted({r["size"] for w in worlds for doc in runs.get((c, w), []) for r in doc["results"]})
        per_world = {}
        for w in worlds:
            docs = runs.get((c, w), [])
            per_world[w] = {p: (stats(docs, p, "time_us"), stats(docs, p, "busbw"))
                            for p in ("out_of_place", "in_place")}
        for size in sizes:
            line = f"| {human_size(size)} |"
            for w in worlds:
                for p in ("out_of_place", "in_place"):
                    t, b = per_world[w][p]
                    line += f" {fmt(*t.get(size, (None, None)), 'time')} | {fmt(*b.get(size, (None, None)))} |"
            lines.append(line)
        lines.append("")
    wrong = total_wrong(runs)
    lines.append(f"Wrong elements over every run: {wrong}.")
    replace_section(args.doc, "kizuna-perf tables", "\n".join(lines))
    print(f"report.py: wrote the kizuna-perf tables into {args.doc}")
    return 1 if wrong else 0


# ---------------------------------------------------------- make bench-compare

def memory_rates(path):
    """(memcpy, float32 reduce) at 64 MiB in one bench_reduce JSON file, bytes/s (None if absent)."""
    copy = reduce = None
    with open(path) as f:
        doc = json.load(f)
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        if b["name"].startswith("BM_memcpy/"):
            copy = b["bytes_per_second"]
        elif b["name"].startswith("BM_reduce/float32/"):
            reduce = b["bytes_per_second"]
    return copy, reduce


def load_memory(results):
    """Medians over repetitions of memcpy and float32 reduce at 64 MiB, one process, bytes/s."""
    rates = [memory_rates(path) for path in sorted(glob.glob(os.path.join(results, "memory-r*.json")))]
    copy = [c for c, _ in rates if c]
    reduce = [r for _, r in rates if r]
    return median_spread(copy), median_spread(reduce), len(copy)


def load_memory_concurrent(results):
    """{p: ((copy, spread), (reduce, spread), repetitions)}: with p processes copying at once,
    the mean over the p of each one's rate, then the median over the repetitions, bytes/s."""
    by = {}
    for path in glob.glob(os.path.join(results, "memory-p*-r*-c*.json")):
        m = re.search(r"memory-p(\d+)-r(\d+)-c\d+\.json$", path)
        if m:
            by.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), []).append(memory_rates(path))
    found = {}
    for p, reps in by.items():
        copy, reduce = [], []
        for rates in reps.values():
            if len(rates) == p and all(c and r for c, r in rates):
                copy.append(statistics.mean(c for c, _ in rates))
                reduce.append(statistics.mean(r for _, r in rates))
        if copy:
            found[p] = (median_spread(copy), median_spread(reduce), len(copy))
    return found


def load_system_congestion(results):
    """The system's congestion control (its name), or "the system's" when not recorded."""
    path = os.path.join(results, "tcp-congestion.txt")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip() or "the system's"
    return "the system's"


def load_tcp(results, kind="tcp-ring"):
    """({world: (median, spread)} of tcp-ring-rate's mean per-direction rate, GB/s; the
    congestion control the runs name, or None for the system's). kind tcp-ring (1 MiB blocks,
    the default), tcp-stream (blocks of the largest size, measured only when that is beyond
    the caches), both under kizuna's congestion control; tcp-system (1 MiB blocks under the
    system's, measured only when kizuna's differs)."""
    rates = {}
    congestion = None
    for path in sorted(glob.glob(os.path.join(results, f"{kind}-n*-r*.txt"))):
        world = int(re.search(kind + r"-n(\d+)-", path).group(1))
        with open(path) as f:
            text = f.read()
        m = re.search(r"tcp-ring-rate procs \d+ min ([\d.]+) mean ([\d.]+)", text)
        if m:
            rates.setdefault(world, []).append(float(m.group(2)))
        named = re.search(r"GB/s per direction congestion (\S+)", text)
        if named:
            congestion = named.group(1)
    return {w: median_spread(v) for w, v in rates.items()}, congestion


# Line colours: one per kizuna algorithm (solid for shm, dashed for tcp), one for
# Open MPI (likewise), one per Gloo algorithm.
COLOURS = {"auto": "#7b1fa2", "symmetric": "#d81b60", "ring": "#2e7d32", "tree": "#1565c0", "mpi": "#ef6c00",
           "gloo-ring": "#212121", "gloo-ring_chunked": "#795548", "gloo-halving_doubling": "#9e9e9e",
           "gloo-bcube": "#c0ca33"}


# cache-distance's round trip above which two CPUs' caches are far apart: the
# placement probe's line (src/comm/placement_probe.cpp, kFar), so that the
# report and the library call the same CPUs near.
FAR_NS = 450


def load_distances(results):
    """{(label, world, rep, small): [round trip ns, ...]}: cache-distance's measurements
    before and after each sweep of each configuration (NAME.distance, NAME-small.distance)."""
    out = {}
    for path in glob.glob(os.path.join(results, "*.distance")):
        m = re.fullmatch(r"(?P<label>(kizuna|gloo|mpi)-[a-z_-]+?)-n(?P<world>\d+)-r(?P<rep>\d+)(?P<small>-small)?"
                         r"\.distance", os.path.basename(path))
        if not m:
            continue
        trips = [float(x.group(1)) for x in re.finditer(r"round-trip-ns (\d+(?:\.\d+)?)", open(path).read())]
        if trips:
            out[(m.group("label"), int(m.group("world")), int(m.group("rep")), bool(m.group("small")))] = trips
    return out


def rep_values(docs, rep, field):
    """{size: in-place `field`} of one configuration's repetition `rep`."""
    return {row["size"]: row["in_place"][field] for doc in docs if doc["rep"] == rep
            for row in doc["results"] if row.get("in_place")}


def placement_section(runs, distances, worlds):
    """Where the two CPUs were for each shared-memory configuration's repetitions, with its
    busbw at 1 MiB, and kizuna against Open MPI over the repetitions both drew alike."""
    if not distances:
        return []
    shm = [c for c in COMPARE_CONFIGS if c[2] == "shm"]
    out = ["### Where the two CPUs were", "",
           "This machine's two CPUs are virtual: the host places them, and moves them, so that they "
           "share a last-level cache one minute (\"near\") and not the next (\"far\"). "
           "`cache-distance` (bench/compare/cache_distance.cpp) measured the round trip of one cache "
           "line between them right before and right after each configuration's sweeps; "
           f"a round trip over {FAR_NS} ns is far. Cells: round trips before / after the sweep up to 1 KiB "
           "and that repetition's time at 8 B; the same for the sweep from 2 KiB, and its busbw at 1 MiB.",
           ""]
    notes = []
    for w in worlds:
        present = [c for c in shm if (c[0], w) in runs]
        reps = sorted({doc["rep"] for c in present for doc in runs[(c[0], w)]})
        if not present or not any((c[0], w, r, False) in distances for c in present for r in reps):
            continue
        out += [f"{w} ranks:", "", "| configuration | " + " | ".join(f"repetition {r}" for r in reps) + " |",
                "|---|" + "---|" * len(reps)]
        for label, title, _ in present:
            cells = []
            for r in reps:
                parts = []
                for small, size, field, unit in ((True, 8, "time_us", "us"), (False, MIB, "busbw", "GB/s")):
                    trips = distances.get((label, w, r, small))
                    at = rep_values(runs[(label, w)], r, field).get(size)
                    if not trips and at is None:
                        continue
                    text = " / ".join(f"{t:.0f}" for t in trips) + " ns" if trips else "n/a"
                    if at is not None:
                        text += f": {number(at, 'time' if small else 'busbw')} {unit}"
                    parts.append(text)
                cells.append("; ".join(parts) if parts else "n/a")
            out.append(f"| {title} | " + " | ".join(cells) + " |")
        out.append("")
        # kizuna auto against Open MPI, repetition by repetition, where both drew one placement.
        for kind in ("near", "far"):
            def drew(label, r):
                trips = distances.get((label, w, r, False))
                return trips and all((t > FAR_NS) == (kind == "far") for t in trips)
            ratios = []
            for r in reps:
                if not (drew("kizuna-shm-auto", r) and drew("mpi-shm", r)):
                    continue
                k = rep_values(runs[("kizuna-shm-auto", w)], r, "busbw")
                m = rep_values(runs[("mpi-shm", w)], r, "busbw")
                pairs = [(k[s] / m[s], s) for s in k if s in m and 64 * KIB <= s <= 64 * MIB and m[s]]
                if pairs:
                    ratios.append((min(pairs), r))
            if ratios:
                worst = min(ratios)
                notes.append(f"{w} ranks, both {kind}: kizuna shm auto at least {worst[0][0]:.2f}x Open MPI shm "
                             f"from 64 KiB to 64 MiB in repetition" + ("s " if len(ratios) > 1 else " ")
                             + ", ".join(str(r) for _, r in sorted(ratios, key=lambda x: x[1]))
                             + f" (worst: {worst[0][0]:.2f}x at {human_size(worst[0][1])}, repetition {worst[1]}).")
    if notes:
        out += ["Kizuna against Open MPI within one repetition, where both drew the same placement "
                "(the targets above are judged on the medians, whatever was drawn):", ""]
        out += [f"- {n}" for n in notes] + [""]
    return out


def tic_label(v):
    for unit, scale in (("G", 1 << 30), ("M", MIB), ("K", KIB)):
        if v >= scale:
            return f"{v // scale}{unit}"
    return str(v)


def plot(args, runs, worlds, sizes):
    """Data files and a gnuplot script; PNGs of busbw and latency against size."""
    os.makedirs(args.plots, exist_ok=True)
    data_dir = os.path.join(args.results, "plot-data")
    os.makedirs(data_dir, exist_ok=True)
    present = [c for c in COMPARE_CONFIGS if any((c[0], w) in runs for w in worlds)]
    script = []
    for w in worlds:
        for metric, field, ylabel, logy in (("busbw", "busbw", "bus bandwidth (GB/s)", False),
                                            ("latency", "time_us", "time per all-reduce (us)", True)):
            cols = []
            for label, title, group in present:
                docs = runs.get((label, w))
                if not docs:
                    continue
                st = stats(docs, "in_place", field)
                path = os.path.join(data_dir, f"{metric}-{label}-n{w}.dat")
                with open(path, "w") as f:
                    for size in sizes:
                        if size in st and st[size][0] is not None:
                            f.write(f"{size} {st[size][0]}\n")
                dash = "dt 1" if group == "shm" else "dt 2"
                width = "lw 2.5" if label.startswith("kizuna") else "lw 1.5"
                colour = COLOURS[label.split("-", 2)[-1] if label.startswith("kizuna") else label.split("-")[0] if label.startswith("mpi") else label]
                cols.append(f"'{path}' using 1:2 with linespoints {dash} {width} lc rgb '{colour}' pt 7 ps 0.5 title '{title}'")
            out = os.path.join(args.plots, f"{metric}_n{w}.png")
            script += [
                "set terminal pngcairo size 1100,650 noenhanced font ',10'",
                f"set output '{out}'",
                f"set title 'all-reduce float32 sum, {w} ranks, in-place: {metric} (medians; solid: shared memory, dashed: TCP)'",
                "set logscale x 2",
                "set xtics (" + ", ".join(f"'{tic_label(v)}' {v}" for v in sizes if v and (v.bit_length() - 1) % 2 == 0) + ")",
                "set xlabel 'size (bytes)'",
                f"set ylabel '{ylabel}'",
                "set logscale y" if logy else "unset logscale y",
                "set key outside right top",
                "set grid",
                "plot " + ", \\\n     ".join(cols),
                "",
            ]
    script_path = os.path.join(data_dir, "plots.gp")
    with open(script_path, "w") as f:
        f.write("\n".join(script))
    result = subprocess.run(["gnuplot", script_path], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print("report.py: gnuplot failed:\n" + result.stderr, file=sys.stderr)
        return []
    return [f"{m}_n{w}.png" for w in worlds for m in ("busbw", "latency")]


def iterations_line(runs):
    """'-n 1000 -w 100 per size from 4 B to 1 KiB, -n 20 -w 5 per size from 2 KiB to 64 MiB': the
    iterations of each sweep, as the results files say."""
    sweeps = {}
    for docs in runs.values():
        for doc in docs:
            sizes = [r["size"] for r in doc["results"]]
            if sizes:
                key = (doc["iters"], doc["warmup"])
                low, high = sweeps.get(key, (min(sizes), max(sizes)))
                sweeps[key] = (min(low, min(sizes)), max(high, max(sizes)))
    parts = sorted(sweeps.items(), key=lambda kv: kv[1][0])
    return ", ".join(f"-n {n} -w {w} per size from {human_size(lo)} to {human_size(hi)}"
                     for (n, w), (lo, hi) in parts)


def compare(args):
    # Each configuration's repetition is one sweep, or two (NAME-small.json
    # up to 1 KiB with more iterations, NAME.json from 2 KiB): their sizes
    # do not overlap, so a size has one figure per repetition either way.
    runs = load_runs(args.results,
                     r"(?P<label>(kizuna|gloo|mpi)-[a-z_-]+?)-n(?P<world>\d+)-r(?P<rep>\d+)(-small)?\.json")
    if not runs:
        sys.exit("report.py: no results in " + args.results)
    worlds = sorted({w for _, w in runs})
    sizes = sorted({r["size"] for docs in runs.values() for doc in docs for r in doc["results"]})
    reps = repetitions(runs)
    (rc, rc_spread), (rr, rr_spread), mem_reps = load_memory(args.results)
    tcp, kizuna_cc = load_tcp(args.results)
    tcp_stream, _ = load_tcp(args.results, "tcp-stream")
    tcp_system, _ = load_tcp(args.results, "tcp-system")
    system_cc = load_system_congestion(args.results)
    cores = os.cpu_count() or 1
    out = []   # the section
    say = []   # what is printed on the terminal too

    out += [
        "## Side by side: kizuna, Gloo and Open MPI (`make bench-compare`)",
        "",
        f"Command: `{args.command}`; {measured_on(args.results)}.",
        "",
        f"All-reduce of float32 with sum, in-place (Gloo's algorithms are in-place only), sizes "
        f"{human_size(sizes[0])} .. {human_size(sizes[-1])}, ranks as processes on this machine, "
        f"{iterations_line(runs)}, every result checked; "
        f"{reps} repetitions, the configurations interleaved within each. Figures are medians over "
        f"the repetitions, ± half their range where it is 1% or more. kizuna's transport is forced "
        f"with KIZUNA_TRANSPORT (kizuna-perf --transport); Open MPI runs once with its defaults "
        f"(shared memory) and once with `--mca btl tcp,self`; Gloo uses its TCP transport on "
        f"loopback in its default (asynchronous) mode.",
        "",
    ]

    # Ceilings and their derivation.
    out += ["### Ceilings measured in the same run", ""]
    mem_ceiling = {}       # {world: GB/s}, from the rates of p processes copying at once
    mem_ceiling_sym = {}
    mem_single = {}        # {world: (ceiling, ceiling_sym)} from one process's rates
    if rc and rr:
        rc_g, rr_g = rc / 1e9, rr / 1e9
        # The rates a rank gets when p ranks run at once; one process's where p is 1 or
        # the concurrent runs are missing (older results).
        rates_at = {1: (rc_g, rr_g)}
        out += [
            f"- memcpy at 64 MiB: **{rc_g:.2f} GB/s** (R_copy); float32 `reduce` (dst += src) at 64 MiB: "
            f"**{rr_g:.2f} GB/s** of one operand (R_reduce); `bench_reduce`, one process alone, "
            f"medians of {mem_reps}.",
        ]
        for p, ((c, c_spread), (r, r_spread), n_reps) in sorted(load_memory_concurrent(args.results).items()):
            rates_at[p] = (c / 1e9, r / 1e9)
            out.append(
                f"- The same with {p} processes at once, one per core, as {p} ranks run: "
                f"**{c / 1e9:.2f} GB/s** (R_copy({p}){spread_note(c_spread)}) and **{r / 1e9:.2f} GB/s** "
                f"(R_reduce({p}){spread_note(r_spread)}) per process, the mean over the {p}, medians of "
                f"{n_reps}: {c / rc:.2f}x and {r / rr:.2f}x one process's, because the {p} share the memory "
                "bus and the caches beyond the first levels.")

        def ceilings(w):
            """(p, rates used, ring ceiling, symmetric ceiling, the same from one process's rates)."""
            p = min(w, cores)
            rcp, rrp = rates_at.get(p, rates_at[1])
            ring = lambda c, r: p / w * 2 / (3 / c + 1 / r)
            sym = lambda c, r: p / w * 2 / (1 / c + 1 / r)
            return p, (rcp, rrp), ring(rcp, rrp), sym(rcp, rrp), ring(rc_g, rr_g), sym(rc_g, rr_g)

        out += [
            "- Memory ceiling of a shared-memory ring all-reduce of S bytes over n ranks. Each rank "
            "sends 2(n-1)/n S bytes (reduce-scatter, then all-gather), each copied once into a "
            "shared slot; it folds (n-1)/n S bytes out of slots into its buffer (reduce-scatter) and "
            "copies (n-1)/n S bytes out of slots (all-gather). Per rank: 3(n-1)/n S bytes of memcpy "
            "and (n-1)/n S bytes of reduce, so",
            "  T >= (n/p) (n-1)/n S (3/R_copy(p) + 1/R_reduce(p)), with p = min(n, cores) ranks running "
            "at once, each at the rates p processes get together, and busbw = 2(n-1)/n S / T gives",
            "  **ceiling(n) = (p/n) x 2 / (3/R_copy(p) + 1/R_reduce(p))**.",
        ]
        for w in worlds:
            p, (rcp, rrp), ring, _, ring1, _ = ceilings(w)
            mem_ceiling[w] = ring
            out.append(f"  - {w} ranks on {cores} cores: p = {p}, (p/n) x 2 / (3/{rcp:.2f} + 1/{rrp:.2f}) = "
                       f"**{ring:.2f} GB/s** (with one process's rates instead, {ring1:.2f} GB/s).")
        out.append("  It assumes the slot design of the shared-memory transport (a sender copies in, a "
                   "receiver reduces or copies straight out).")
        out += [
            "- Memory ceiling of the all-reduce on symmetric memory (`kizuna-perf -R 2`, "
            "docs/symmetric-memory.md), where a rank reads its peers' buffers in place: it folds its "
            "peers' (n-1) shares of its chunk into its own, (n-1)/n S bytes of reduce, and copies the "
            "(n-1) other reduced chunks out of their owners' buffers, (n-1)/n S bytes of memcpy, so",
            "  T >= (n/p) (n-1)/n S (1/R_copy(p) + 1/R_reduce(p)) and "
            "**ceiling_sym(n) = (p/n) x 2 / (1/R_copy(p) + 1/R_reduce(p))**.",
        ]
        for w in worlds:
            p, (rcp, rrp), ring, sym, ring1, sym1 = ceilings(w)
            mem_ceiling_sym[w] = sym
            mem_single[w] = (ring1, sym1)
            out.append(f"  - {w} ranks on {cores} cores: p = {p}, (p/n) x 2 / (1/{rcp:.2f} + 1/{rrp:.2f}) = "
                       f"**{sym:.2f} GB/s** (with one process's rates instead, {sym1:.2f} GB/s).")
        out.append("- Private buffers from `KIZUNA_STAGED_FROM` (64 KiB; for 2 ranks while the CPUs are "
                   "near, 256 KiB up to 6 MiB, larger calls going through the slots; "
                   "docs/symmetric-memory.md#private-buffers-the-staged-all-reduce) take "
                   "the staged all-reduce: symmetric memory's algorithm on copies made, round by round, "
                   "into a staging memory of 512 KiB per rank, which stays in the caches while the CPUs' "
                   "caches are near (and is streamed to memory while they are far, "
                   "docs/symmetric-memory.md#where-the-staging-goes). What it moves "
                   "to and from memory is then what the symmetric all-reduce moves, so **the 64 MiB target "
                   "for private buffers is judged against ceiling_sym(n)**, the higher ceiling; "
                   "ceiling(n), which charges every copy through a slot at memory's rate, is shown beside.")
    else:
        out.append("- memcpy/reduce rates: not measured (bench_reduce missing).")
    for w in worlds:
        if w in tcp:
            rate, spread = tcp[w]
            what = "two processes, full duplex" if w == 2 else f"a ring of {w} processes, every edge busy"
            under = (f", under {kizuna_cc}, the congestion control of kizuna's connections within a host"
                     if kizuna_cc else "")
            flag = f" --congestion {kizuna_cc}" if kizuna_cc else ""
            out.append(f"- Loopback TCP, {what}{under}: **{rate:.2f} GB/s** per direction (±{spread * 100:.0f}% over the repetitions; "
                       f"`tcp-ring-rate --procs {w}{flag}`). A TCP ring all-reduce moves 2(n-1)/n S bytes "
                       f"over each edge, so its busbw cannot exceed this rate.")
        if w in tcp_stream:
            rate, spread = tcp_stream[w]
            out.append(f"  The same with blocks of {human_size(sizes[-1])} (`--block`), so that what is sent "
                       f"and received comes from memory, as a {human_size(sizes[-1])} all-reduce's data does, "
                       f"not from cache: **{rate:.2f} GB/s** (±{spread * 100:.0f}%). The target is judged "
                       f"against the rate above.")
        if w in tcp_system:
            rate, spread = tcp_system[w]
            out.append(f"  Under the system's congestion control ({system_cc}), which Gloo's and Open MPI's "
                       f"connections keep, with 1 MiB blocks: **{rate:.2f} GB/s** (±{spread * 100:.0f}%).")
    out.append("")

    # Targets.
    def st(label, w, field):
        docs = runs.get((label, w))
        return stats(docs, "in_place", field) if docs else {}

    def ratio_over(num, den, lo, hi, worst):
        """Worst ratio num/den over sizes in [lo, hi]: (ratio, size) or None."""
        best = None
        for size in sizes:
            if size < lo or size > hi or size not in num or size not in den:
                continue
            a, b = num[size][0], den[size][0]
            if a is None or not b:
                continue
            r = a / b
            if best is None or worst(r, best[0]):
                best = (r, size)
        return best

    lower = lambda r, b: r < b

    def single_note(busbw, w, which):
        """The ratio to the ceiling derived from one process's rates, where that one differs."""
        if w not in mem_single or busbw is None:
            return ""
        single = mem_single[w][which]
        judged = (mem_ceiling, mem_ceiling_sym)[which][w]
        return "" if abs(single - judged) < 1e-9 else f"; {busbw / single:.2f}x of one process's ceiling"
    higher = lambda r, b: r > b
    rows = []
    for w in worlds:
        ks_b, ks_t = st("kizuna-shm-auto", w, "busbw"), st("kizuna-shm-auto", w, "time_us")
        ksym_b, ksym_t = st("kizuna-shm-symmetric", w, "busbw"), st("kizuna-shm-symmetric", w, "time_us")
        ms_b, ms_t = st("mpi-shm", w, "busbw"), st("mpi-shm", w, "time_us")
        kt_b, kt_t = st("kizuna-tcp-auto", w, "busbw"), st("kizuna-tcp-auto", w, "time_us")
        mt_b, mt_t = st("mpi-tcp", w, "busbw"), st("mpi-tcp", w, "time_us")
        gloo_best = {}
        for g in GLOO:
            for size, (v, _) in st(g, w, "busbw").items():
                if v is not None and (size not in gloo_best or v > gloo_best[size][0]):
                    gloo_best[size] = (v, None)

        def check(name, found, goal, better_is_higher, unit="x", note=""):
            if found is None:
                rows.append(f"| {w} | {name} | not measured | |")
                return
            value, size = found
            met = value >= goal if better_is_higher else value <= goal
            where = f" (worst at {human_size(size)})" if size is not None else ""
            rows.append(f"| {w} | {name} | {value:.2f}{unit}{where}{note} | "
                        f"{'met' if met else 'missed by ' + format(abs(value - goal) / goal * 100, '.0f') + '%'} |")

        check("shm busbw >= 1.2x Open MPI shm, 64 KiB .. 64 MiB",
              ratio_over(ks_b, ms_b, 64 * KIB, 64 * MIB, lower), 1.2, True)
        check("shm latency <= Open MPI shm, 4 B .. 1 KiB",
              ratio_over(ks_t, ms_t, 4, KIB, higher), 1.0, False)
        top = 64 * MIB
        if top in ks_b and w in mem_ceiling:
            check("shm busbw at 64 MiB >= 70% of the memory ceiling (ceiling_sym: the staged all-reduce)",
                  (ks_b[top][0] / mem_ceiling_sym[w], None), 0.7, True,
                  note=f"; {ks_b[top][0] / mem_ceiling[w]:.2f}x of the slots' ceiling" +
                       single_note(ks_b[top][0], w, 1))
        if ksym_b:
            check("shm busbw, symmetric buffers (-R 2), >= 1.2x Open MPI shm, 64 KiB .. 64 MiB",
                  ratio_over(ksym_b, ms_b, 64 * KIB, 64 * MIB, lower), 1.2, True)
            check("shm latency, symmetric buffers (-R 2), <= Open MPI shm, 4 B .. 1 KiB",
                  ratio_over(ksym_t, ms_t, 4, KIB, higher), 1.0, False)
            if top in ksym_b and w in mem_ceiling_sym:
                check("shm busbw, symmetric buffers (-R 2), at 64 MiB >= 70% of its memory ceiling",
                      (ksym_b[top][0] / mem_ceiling_sym[w], None), 0.7, True,
                      note=single_note(ksym_b[top][0], w, 1))
        check("tcp busbw >= 1.5x best Gloo, 1 MiB .. 64 MiB",
              ratio_over(kt_b, gloo_best, MIB, 64 * MIB, lower), 1.5, True)
        check("tcp busbw >= Open MPI tcp, 1 MiB .. 64 MiB",
              ratio_over(kt_b, mt_b, MIB, 64 * MIB, lower), 1.0, True)
        if top in kt_b and w in tcp:
            stream_note = (f"; {kt_b[top][0] / tcp_stream[w][0]:.2f}x of the rate with {human_size(sizes[-1])} blocks"
                           if w in tcp_stream and tcp_stream[w][0] else "")
            check("tcp busbw at 64 MiB >= 80% of loopback rate",
                  (kt_b[top][0] / tcp[w][0], None), 0.8, True, note=stream_note)
        check("tcp latency <= 0.8x Open MPI tcp, 8 B .. 1 KiB",
              ratio_over(kt_t, mt_t, 8, KIB, higher), 0.8, False)
    out += ["### Targets (kizuna with algorithm auto)", "",
            "Ratios of medians; \"worst at\" names the size where the ratio is least favourable. "
            "\"Symmetric buffers\" rows are kizuna's all-reduce on memory from "
            "`Communicator::allocate_symmetric` (`kizuna-perf -R 2`, as nccl-tests' -R 2 registers "
            "symmetric buffers); the other kizuna rows, like Open MPI and Gloo, use private buffers.", "",
            "| ranks | target | measured | verdict |", "|---|---|---|---|"] + rows + [""]
    say += ["targets:"] + rows

    out += placement_section(runs, load_distances(args.results), worlds)

    # Tables: busbw from 1 KiB up (below, it is ~0 and the time says more), time at every size.
    for w in worlds:
        present = [c for c in COMPARE_CONFIGS if (c[0], w) in runs]
        for title, field, kind, lo in (("Bus bandwidth (GB/s)", "busbw", "busbw", KIB),
                                       ("Time per all-reduce (us)", "time_us", "time", 0)):
            out += [f"### {title}, {w} ranks", "",
                    "| size | " + " | ".join(c[1] for c in present) + " |",
                    "|---|" + "---|" * len(present)]
            cols = [st(c[0], w, field) for c in present]
            for size in sizes:
                if size >= lo:
                    out.append(f"| {human_size(size)} | " +
                               " | ".join(fmt(*col.get(size, (None, None)), kind) for col in cols) + " |")
            out.append("")

    pngs = plot(args, runs, worlds, sizes)
    if pngs:
        rel = os.path.relpath(args.plots, os.path.dirname(os.path.abspath(args.doc)))
        out += ["### Plots", ""] + [f"![{p}]({rel}/{p})" for p in pngs] + [""]
    wrong = total_wrong(runs)
    failures_path = os.path.join(args.results, "failures.txt")
    failures = open(failures_path).read().split() if os.path.exists(failures_path) else []
    out.append(f"Wrong elements over every run: {wrong}. Runs that failed and are left out: "
               + (", ".join(f"`{f}`" for f in failures) if failures else "none") + ".")
    replace_section(args.doc, "bench-compare", "\n".join(out))
    print("\n".join(say))
    print(f"report.py: wrote the comparison into {args.doc}" + (f" and {len(pngs)} plots into {args.plots}" if pngs else ""))
    return 1 if wrong else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["bench", "compare", "stamp"])
    parser.add_argument("--results", required=True)
    parser.add_argument("--doc")
    parser.add_argument("--plots", help="where the comparison's PNGs go (default: DIR/plots)")
    parser.add_argument("--command")
    args = parser.parse_args()
    if args.mode == "stamp":
        with open(os.path.join(args.results, "measured.txt"), "w") as f:
            f.write(machine_line() + "\n")
        sys.exit(0)
    if not args.doc or not args.command:
        parser.error("--doc and --command are required for " + args.mode)
    if not args.plots:
        args.plots = os.path.join(args.results, "plots")
    sys.exit(bench(args) if args.mode == "bench" else compare(args))


if __name__ == "__main__":
    main()
