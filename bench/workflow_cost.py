"""What a workflow costs (issue 31), on a private redis-server, every figure from real worker processes:

1. per step: a chain of ``--steps`` no-op steps (``kiq.plugins.workflow``) against the same number of plain no-op
   jobs run one after the other (each job's ``perform_async`` pushes the next): the µs a step adds to a plain
   push-and-run, end to end (building and pushing the workflow included);
2. a chord of ``--members`` no-op members and a body that gets their results, kiq against Celery's chord (Redis
   broker and Redis result backend) on the same redis-server in the same run, each with one worker of 10 threads;
   the ratio is Celery's time over kiq's;
3. a fan-out/fan-in of ``--fanout`` members (a chord, kiq alone): the time to build and push it, and end to end.

Every run is timed from before anything is built or pushed until its last job (the chain's last step, the chord's
body) has run: that job RPUSHes to a Redis list the driver blocks on, so the systems' result APIs (kiq's
``result(wait=)`` polls, Celery's ``get`` subscribes) are not what is timed; the result is then read through them
and checked (the body's count of member results, the plain chain's length).

    .venv-bench/bin/python -m bench.workflow_cost [--quick] [--runs 3] [--json FILE]

Each figure is the median of ``--runs`` runs after a warm-up run (workers started and idle before the clock).
The bench venv runs this harness and Celery (``--peer-python``); kiq runs in its own venv (``--kiq-python``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import machine, report
from bench.redis_server import RedisServer
from bench.runner import BenchError, Runner, Settings
from bench.systems import CONCURRENCY, System, Toolchain

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600.0  # seconds a run may take before it counts as failed (a chord that hangs)
C = str(CONCURRENCY)

KIQ = System(
    name="kiq_workflow",
    label="kiq workflow",
    worker=lambda t: [t.kiq_python, "-m", "kiq.cli", "worker", "-r", "bench.systems.kiq_workflow", "-c", C,
                      "--redis-url", t.redis_url],
    pusher=lambda t: [t.kiq_python, "-m", "bench.systems.kiq_workflow"],
    queue_key="queue:default",
    env=lambda t: {"KIQ_REDIS_URL": t.redis_url, "KIQ_LOG_LEVEL": "WARNING", "KIQ_PLUGINS": "workflow"},
    failure_keys=("retry", "dead"),
)  # fmt: skip
CELERY = System(
    name="celery_chord",
    label="Celery chord",
    worker=lambda t: [t.peer_script("celery"), "-A", "bench.systems.celery_chord", "worker", "-P", "threads",
                      "-c", C, "-l", "WARNING"],
    pusher=lambda t: [t.peer_python, "-m", "bench.systems.celery_chord"],
    queue_key="celery",
)  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.workflow_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs (a development check, ~1 minute)")
    parser.add_argument("--steps", type=int, help="the chain's length (default 1,000; --quick 200)")
    parser.add_argument("--members", type=int, help="the chord against Celery's (default 1,000; --quick 200)")
    parser.add_argument("--fanout", type=int, help="the fan-out/fan-in's members (default 10,000; --quick 2,000)")
    parser.add_argument("--runs", type=int, help="runs per figure, the median kept (default 3; --quick 1)")
    parser.add_argument("--port", type=int, default=6394, help="the private redis-server's port")
    parser.add_argument("--kiq-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--peer-python", default=sys.executable, help="the interpreter with Celery (.venv-bench)")
    parser.add_argument("--no-pin", action="store_true", help="redis-server on any CPU (see bench/machine.py)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--logs", type=Path, help="the workers' logs (default bench/results/logs/workflow-DATE-TIME)")
    args = parser.parse_args(argv)
    for name, full, quick in (("steps", 1000, 200), ("members", 1000, 200), ("fanout", 10000, 2000), ("runs", 3, 1)):
        value = getattr(args, name)
        if value is None:
            setattr(args, name, quick if args.quick else full)
        elif value < 1:
            parser.error(f"--{name} {value}: give a positive number")
    return args


class Bench:
    """One worker at a time on the run's redis-server, started and stopped through the no-op harness's Runner."""

    def __init__(self, tools: Toolchain, logs: Path) -> None:
        self.runner = Runner(tools, Settings(jobs=0, single_jobs=0, latency_jobs=0, latency_rate=1.0,
                                             max_drain_seconds=TIMEOUT, logs=logs, stop_timeout=10.0))  # fmt: skip
        self.tools = tools
        self.logs = logs

    def measure(self, system: System, runs: list[tuple[str, list[str], int, Any]], repeat: int) -> dict[str, Any]:
        """Start ``system``'s worker on an empty Redis, then each ``(name, driver words, count, expected result)``:
        a warm-up run of at most 10, then ``repeat`` timed runs, each one's result checked. name -> outcomes."""
        self.runner.redis.flushall()
        log = self.logs / f"{system.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        worker = self.runner.start_worker(system, log)
        outcomes: dict[str, list[dict[str, Any]]] = {}
        try:
            for name, words, count, expected in runs:
                self.drive(system, [*words, str(min(count, 10))], worker, log)
                outcomes[name] = []
                for _ in range(repeat):
                    outcome = self.drive(system, [*words, str(count)], worker, log)
                    if outcome["result"] != expected:
                        raise BenchError(f"{system.label} {name}: result {outcome['result']!r}, not {expected!r}")
                    outcomes[name].append(outcome)
                shown = ", ".join(f"{outcome['seconds']:.3f} s" for outcome in outcomes[name])
                print(f"  {system.label}, {name} of {count:,}: {shown}", flush=True)
            self.runner.check_failures(system, log)
        finally:
            self.runner.stop(worker)
        return outcomes

    def drive(self, system: System, words: list[str], worker: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
        if worker.poll() is not None:
            raise BenchError(f"the {system.label} worker exited ({worker.returncode}); see {log}")
        command = [*system.pusher(self.tools), *words, str(TIMEOUT)]
        output = self.runner._check_call(system, command, f"{system.label} {' '.join(words)}")
        try:
            return dict(json.loads(output.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            raise BenchError(f"{system.label}: no result line in the driver's output: {output[-500:]!r}") from None


def median(outcomes: list[dict[str, Any]], key: str = "seconds") -> float:
    return float(statistics.median(float(outcome[key]) for outcome in outcomes))


def run(args: argparse.Namespace) -> dict[str, Any]:
    redis_cpus, _ = machine.pinning(args.no_pin)
    server = RedisServer(args.port, cpus=redis_cpus)
    server.start()
    try:
        tools = Toolchain(ROOT, server.url, args.kiq_python, args.peer_python, "", "", False)
        logs = args.logs or ROOT / "bench/results/logs" / f"workflow-{time.strftime('%Y%m%d-%H%M%S')}"
        bench = Bench(tools, logs)
        kiq = bench.measure(
            KIQ,
            [
                ("plain", ["plain"], args.steps, args.steps),
                ("chain", ["chain"], args.steps, None),  # no-op steps: the chain's result is None
                ("chord", ["chord"], args.members, args.members),
                ("fanout", ["chord"], args.fanout, args.fanout),
            ],
            args.runs,
        )
        celery = bench.measure(CELERY, [("chord", [], args.members, args.members)], args.runs)
        described = machine.describe(args.kiq_python, args.peer_python, server.version(), yjit=False)
    finally:
        server.stop()
    plain, chain = median(kiq["plain"]), median(kiq["chain"])
    kiq_chord, celery_chord = median(kiq["chord"]), median(celery["chord"])
    return {
        "settings": {"steps": args.steps, "members": args.members, "fanout": args.fanout, "runs": args.runs,
                     "concurrency": CONCURRENCY, "quick": args.quick},
        "machine": {key: value for key, value in described.items() if key != "ruby"},
        "per_step": {"steps": args.steps, "plain_us": plain / args.steps * 1e6, "chain_us": chain / args.steps * 1e6,
                     "overhead_us": (chain - plain) / args.steps * 1e6},
        "chord": {"members": args.members, "kiq_seconds": kiq_chord, "celery_seconds": celery_chord,
                  "ratio": celery_chord / kiq_chord, "celery_version": celery["chord"][0]["version"]},
        "fanout": {"members": args.fanout, "push_seconds": median(kiq["fanout"], "push_seconds"),
                   "seconds": median(kiq["fanout"])},
        "logs": os.path.relpath(logs, ROOT),
    }  # fmt: skip


def rows(part: dict[str, Any]) -> list[list[str]]:
    """The report's rows: what, figure, how measured."""
    step, chord, fanout = part["per_step"], part["chord"], part["fanout"]
    return [
        ["workflow: a chain's step", f"{step['overhead_us']:+.0f} µs/step",
         f"a chain of {step['steps']:,} no-op steps {step['chain_us']:.0f} µs/step vs the same jobs pushed one by one "
         f"from the previous one {step['plain_us']:.0f} µs/step"],
        ["workflow: a chord of {:,} no-op members, vs Celery".format(chord["members"]),
         f"{chord['ratio']:.2f}x as fast as Celery",
         f"kiq {chord['kiq_seconds']:.2f} s vs Celery {chord['celery_version']} {chord['celery_seconds']:.2f} s "
         "(Redis broker and result backend), from building the chord to its body's run, one worker of 10 threads each"],
        ["workflow: a fan-out/fan-in of {:,} members".format(fanout["members"]), f"{fanout['seconds']:.2f} s",
         f"a chord, built and pushed in {fanout['push_seconds']:.2f} s, to its body's run "
         f"({fanout['members'] / fanout['seconds']:,.0f} members/s)"],
    ]  # fmt: skip


def markdown(part: dict[str, Any]) -> str:
    """The report's section (bench/all.py)."""
    settings = part["settings"]
    head = (
        f"Median of {settings['runs']} run{'s' if settings['runs'] > 1 else ''} after a warm-up, one worker process "
        f"of {settings['concurrency']} threads per system, a private redis-server; logs in {part['logs']}.\n\n"
    )
    return head + report.render_table([["what", "figure", "measured as"], ["---"] * 3, *rows(part)], [])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        part = run(args)
    except (BenchError, RuntimeError) as exc:
        print(f"workflow_cost failed: {exc}", file=sys.stderr)
        return 1
    print()
    for what, figure, how in rows(part):
        print(f"{what}: {figure} ({how})")
    text = json.dumps(part, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
