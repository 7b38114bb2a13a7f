"""Everything the README's table of bars and ratios needs, back to back, in one command.

Runs each benchmark in turn (full sizes, three rounds each; `--quick` for a smoke
run of this script itself), keeps each one's output and JSON results in an output
folder, and ends with one summary table: every ratio against a peer as the median
of its per-round ratios with their min-max, every absolute bar as a median with
min-max, the machine's fsync rate, and the load average around each script.

    .venv/bin/python bench/run_all.py [--quick] [--out DIR] [--only peers,steps,...]
        [--hog 1] [--dir DIR]

What it runs (names for --only):

    limits   physical_limits.py                        fsync rate, timer lateness
    peers    peers_alarms.py                           scenario 1 against APScheduler, huey
    fire     alarm_fire.py --shape spread-half          p99 lateness below saturation
    steps    durable_steps.py                           scenario 3 against DBOS
    aws      aws_steps.py                               steps through the AWS SDK against
                                                        AWS's local runner and DBOS
    waits    durable_waits.py                           scenario 3b against DBOS
    retry    retry_ladder.py                            scenario 4
    console  console_latency.py --alarms 1000000 --rate 1000 --hog 0,H
    bulk     bulk_rearm.py --hog 0,H

Full: about 60-80 min on 2 cores (the console at a million alarms and DBOS take the
most); --quick: about 25 min. Run it on a quiet machine: each script prints the
load average, and the summary repeats it, so that a loaded run shows as one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import fsync_rate, loadavg, machine, print_config

HERE = Path(__file__).resolve().parent


def plan(hog: int) -> dict[str, list[str]]:
    return {
        "limits": ["physical_limits.py"],
        "peers": ["peers_alarms.py"],
        "fire": ["alarm_fire.py", "--shape", "spread-half"],
        "steps": ["durable_steps.py"],
        "aws": ["aws_steps.py"],
        "waits": ["durable_waits.py"],
        "retry": ["retry_ladder.py"],
        "console": ["console_latency.py", "--alarms", "1000000", "--rate", "1000",
                    "--hog", f"0,{hog}"],
        "bulk": ["bulk_rearm.py", "--hog", f"0,{hog}"],
    }


def run(name: str, argv: list[str], args: Any, out: Path) -> dict[str, Any]:
    """One script, its output teed to out/NAME.log; its JSON results, or why not."""
    result = out / f"{name}.json"
    cmd = [sys.executable, str(HERE / argv[0]), *argv[1:], "--json-out", str(result)]
    if args.quick:
        cmd.append("--quick")
    if args.dir:
        cmd += ["--dir", args.dir]
    load0, t0 = loadavg(), time.monotonic()
    print(f"\n## {name}: {' '.join(cmd[1:])}  (load {load0:.2f})", flush=True)
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=HERE)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    took = (time.monotonic() - t0) / 60
    meta = {"name": name, "minutes": took, "load_before": load0, "load_after": loadavg(),
            "exit": code}
    if code != 0 or not result.exists():
        print(f"## {name} FAILED (exit {code}); see {out / f'{name}.log'}", flush=True)
        return {"meta": meta}
    return {"meta": meta, **json.loads(result.read_text())}


def fmt(stats: tuple[Any, Any, Any], unit: str) -> str:
    med, lo, hi = stats
    if med is None:
        return "n/a"
    def one(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"
    return f"{one(med)}{unit} ({one(lo)}{' to ' if lo < 0 else '-'}{one(hi)})"


def figure(data: dict[str, Any], title_part: str, label: str) -> tuple[Any, Any, Any]:
    for title, table in data.get("tables", {}).items():
        if title_part in title and label in table:
            row = table[label]
            return row["median"], row["min"], row["max"]
    return None, None, None


def summary_rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(what, figure, bar, verdict) rows of the summary table."""
    rows: list[tuple[str, str, str, str]] = []
    for name in ("peers", "steps", "aws", "waits"):
        for r in results.get(name, {}).get("ratios", []):
            if "CPU" in r["name"] and not r["headline"]:
                continue
            bar = f">= {r['bar']:g}x" if r["bar"] is not None else ""
            verdict = "" if r["met"] is None else ("met" if r["met"] else "NOT met")
            rows.append((("* " if r["headline"] else "") + r["name"],
                         fmt((r["median"], r["min"], r["max"]), "x"), bar, verdict))
    fire = figure(results.get("fire", {}), "spread-half", "lateness at durable completion p99")
    if fire[0] is None:
        fire = figure(results.get("fire", {}), "spread", "lateness at durable completion p99")
    if fire[0] is not None:
        rows.append(("alarm p99 lateness at 5,000/s, durable completion (ms)", fmt(fire, ""),
                     "< 10", "met" if fire[0] < 10 else "NOT met"))
    for name, what in (("waits", "wake p99 vs intended (ms)"),
                       ("retry", "retry start p99 vs scheduled (ms)")):
        bar = results.get(name, {}).get("bar")
        if bar and bar["value"] is not None:
            stats = (figure(results[name], "", "wake lateness p99 (vs intended)")
                     if name == "waits" else
                     figure(results[name], "", "retry start vs scheduled time p99"))
            rows.append((f"alarmtop {what}", fmt(stats, ""), f"< {bar['below']:g}",
                         "met" if bar["value"] < bar["below"] else "NOT met"))
    for p in results.get("console", {}).get("pooled", []):
        if p["p99_ms"] is None:
            fig = f"n/a ({p['presses']} presses); max {p['max_ms']:.0f}"
            verdict = "n/a"
        else:
            fig = f"{p['p99_ms']:.0f} (pooled, {p['presses']} presses); max {p['max_ms']:.0f}"
            verdict = "met" if p["p99_ms"] < 100 else "NOT met"
        rows.append((f"console {p['kind']} p99 (ms), {p['rate']:,.0f}/s firing, "
                     f"{p['hog']} hog(s)", fig, "< 100", verdict))
    bulk = results.get("bulk", {})
    for title in bulk.get("tables", {}):
        hog = title.rsplit(", ", 1)[-1]
        rate = figure(bulk, title, "re-armed per second (durable)")
        added = figure(bulk, title, "p99 added by the batch")
        if rate[0] is not None:
            rows.append((f"bulk re-arm rate (/s), {hog}", fmt(rate, ""), ">= 5,000",
                         "met" if rate[0] >= 5000 else "NOT met"))
        if added[0] is not None:
            rows.append((f"bulk re-arm p99 added (ms), {hog}", fmt(added, ""), "<= +10",
                         "met" if added[0] <= 10 else "NOT met"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="every script's --quick")
    parser.add_argument("--out", default=None, help="output folder (default: bench-results-"
                        "<UTC time> in the current folder)")
    parser.add_argument("--only", default=None, help="comma-separated names (see above)")
    parser.add_argument("--hog", type=int, default=1, help="CPU hogs for the console and "
                        "bulk bars (they also run without)")
    parser.add_argument("--dir", default=None, help="where the scripts put their data")
    args = parser.parse_args()
    steps = plan(args.hog)
    names = args.only.split(",") if args.only else list(steps)
    unknown = set(names) - set(steps)
    if unknown:
        raise SystemExit(f"unknown names {sorted(unknown)}: choose from {list(steps)}")
    out = Path(args.out or f"bench-results-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    fsync0 = fsync_rate(args.dir, 2.0)
    cfg = {"machine": machine(), "fsync rate at the start (commits/s)": round(fsync0),
           "runs": names, "quick": args.quick, "output": str(out)}
    print_config("all benchmarks for the README", cfg)
    started = time.monotonic()
    results = {name: run(name, steps[name], args, out) for name in names}
    fsync1 = fsync_rate(args.dir, 2.0)
    rows = summary_rows(results)
    limits = figure(results.get("limits", {}), "physical", "sqlite3 commits/s (1 row/txn)")
    lines = [
        f"Machine: {cfg['machine']['cpus']} CPUs, Python {cfg['machine']['python']}, SQLite "
        f"{cfg['machine']['sqlite']}, alarmtop {cfg['machine']['alarmtop']}; "
        f"{cfg['machine']['when_utc']} UTC, {(time.monotonic() - started) / 60:.0f} min.",
        f"fsync rate (SQLite commits/s, WAL, FULL, one row each): {fsync0:,.0f} at the start, "
        f"{fsync1:,.0f} at the end"
        + (f"; physical_limits.py: {fmt(limits, '')}" if limits[0] is not None else "") + ".",
        "Load average (1 min) around each script: " + ", ".join(
            f"{n} {r['meta']['load_before']:.1f}-{r['meta']['load_after']:.1f} "
            f"({r['meta']['minutes']:.0f} min{'' if r['meta']['exit'] == 0 else ', FAILED'})"
            for n, r in results.items()) + ".",
        "Every absolute figure is this machine's. Ratios: the median of the per-round "
        "ratios (min-max), > 1 favours alarmtop; * marks the headline (matched settings, "
        "the peer's production backend).",
        "",
        "| what | figure | bar | |",
        "| --- | --- | --- | --- |",
        *(f"| {what} | {fig} | {bar} | {verdict} |" for what, fig, bar, verdict in rows),
    ]
    text = "\n".join(lines)
    (out / "summary.md").write_text(text + "\n")
    print(f"\n== summary (also in {out / 'summary.md'})\n{text}")
    if any(r["meta"]["exit"] != 0 for r in results.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
