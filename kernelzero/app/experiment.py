"""`kernelzero experiment`: does reinforcement learning make the Coder better on modules it never trained on? Arms from one SFT checkpoint with the same sample budget, judged by the held-out protocol against a control at learning rate 0; a benchmark that reports what it measured, not a test that passes.

Arms (`--arms`, default a,b,c):
  a  CA-GRPO with frontier sampling, the Proposer trained;
  b  CA-GRPO with uniform API-set sampling, the Proposer frozen;
  c  control: arm a's pipeline at learning rate 0 (versions advance and are published, weights do not move).
Every arm starts from the same bootstrap (bootstrap/from_zero.py: the demo's distillation, tokenizer and
SFT, cached) in a run directory of its own (embedded log, analytics, checkpoints) and runs `--rounds` rounds of
`--modules` proposed modules with `--group-size` samples each. Version 0 is the same policy in every arm, so the
held-out modules (kernelzero/kit/heldout_protocol.py) are measured at version 0 once, in `start/`; each arm
measures them again every `--measure-every` rounds and at its end: pass@1 sampled at the Coder's temperature
(group-size samples a module), greedy, and pass@k of the sampled group, with Wilson intervals over modules; and at the
end the per-module paired difference of each arm against the control, with a bootstrap interval over modules. Every
measurement draws a module's samples with the same random numbers (its sampling seed). Beside them, as many
training rows (split "probe", spread over the SFT's training file) are measured the same way: what an arm's training
keeps of what SFT built, on the same modules at every measurement. An arm whose directory holds
arm.json is read back instead of run again; an arm stopped midway continues after the last round or held-out step it
finished (kernelzero/app/journal.py), so the experiment can run in pieces (`timeout 590 kernelzero experiment --out
DIR` again and again) with the same arguments (--arms aside: arms can be added to a finished experiment).
experiment.json holds every number, experiment.md the table, heldout.png and verdicts.png the curves.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

from kernelzero.bootstrap.from_zero import Plan, quiet_libraries
from kernelzero.app.demo import (RUN_ARGUMENTS, STAGES, add_loop_arguments, continuing, loop_argument_error,
                                 loop_config, measure_heldout, run_stages, self_check, summarize, warm_start)
from kernelzero.app.journal import Journal
from kernelzero.app.warm_stages import WarmStages
from kernelzero.config import Config, dump_config

ARMS = {
    "a": "CA-GRPO, frontier sampling, Proposer trained",
    "b": "CA-GRPO, uniform API sets, Proposer frozen",
    "c": "control: arm a at learning rate 0",
}
CONTROL = "c"
MEASURES = ("sampled", "greedy", "pass@k", "probe")  # per_module's measures, in the table's order
# per measured row (its index in its rows file), split and decoding: its samples judged, and how many correct
PER_MODULE = """
SELECT a.split, regexp_extract(a.module_id, '-(\\d{4})(-greedy)?$', 1)::INT AS row_index,
       CASE WHEN s.temperature = 0 THEN 'greedy' ELSE 'sampled' END AS decoding, count(*) AS samples,
       sum(a.passed::INT) AS correct
FROM attempts a LEFT JOIN samples s USING (sample_id)
WHERE a.split IN ('heldout', 'probe') AND a.module_id LIKE a.split || '-' || ? || '-%' GROUP BY ALL ORDER BY ALL
"""
CURVE = {"curve": "SELECT * FROM learning_curve",
         "verdicts": "SELECT policy_version, verdict, count(*) AS samples FROM attempts WHERE split = 'train' "
                     "GROUP BY ALL ORDER BY ALL"}


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=None, metavar="DIR", help="run directory (default: runs/experiment-TIMESTAMP)")
    parser.add_argument("--arms", default="a,b,c", help="arms to run, of a, b, c (default a,b,c)")
    parser.add_argument("--rounds", type=int, default=8, help="propose-code-evaluate-train rounds per arm (default 8)")
    parser.add_argument("--measure-every", type=int, default=4, metavar="R",
                        help="measure the held-out modules every R rounds as well as at the end (default 4)")
    add_loop_arguments(parser, Plan())
    parser.set_defaults(heldout=64, group_size=8, modules=8)


def pointed_at(base: Config, out: Path) -> Config:
    """A copy of the base configuration with its log, analytics and checkpoints in `out`."""
    config = copy.deepcopy(base)
    config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.trainer.checkpoint_dir = str(out / "checkpoints")
    return config


def arm_config(base: Config, arm: str, out: Path) -> Config:
    """The arm's configuration: the base pointed at `out`, changed only where the arm differs."""
    config = pointed_at(base, out)
    if arm == "b":
        config.proposer.sampling, config.trainer.proposer_steps = "uniform", 0
    elif arm == CONTROL:
        config.trainer.learning_rate = config.trainer.lora_learning_rate = 0.0
    return config


def per_module(config: Config, tag: str) -> dict[str, dict[int, float]]:
    """measure -> row index -> value, for the measurement named `tag`: on the held-out rows pass@1 "sampled" (the share
    of a module's samples judged correct) and "greedy", and "pass@k" of the sampled group (k its size); "probe", pass@1
    sampled on the training rows measured beside them."""
    from kernelzero.analytics.db import configured_connection
    from kernelzero.analytics.kernelbench_metrics import pass_at_k

    rates: dict[str, dict[int, float]] = {measure: {} for measure in MEASURES}
    with configured_connection(config) as con:
        for split, index, decoding, samples, correct in con.execute(PER_MODULE, [tag]).fetchall():
            if split == "probe":
                rates["probe"][index] = correct / samples
                continue
            rates[decoding][index] = correct / samples
            if decoding == "sampled":
                rates["pass@k"][index] = pass_at_k(samples, correct, config.coder.group_size)
    return rates


def summary_of(rates: dict[int, float], modules: int) -> dict:
    """pass@1 over the modules measured, with Wilson's interval; how many of `modules` were measured."""
    from kernelzero.kit.heldout_protocol import wilson

    measured = len(rates)
    mean = sum(rates.values()) / measured if measured else 0.0
    low, high = wilson(mean, measured)
    return {"pass_at_1": mean, "low": low, "high": high, "modules": measured, "of": modules}


def paired(arm: dict[int, float], control: dict[int, float]) -> dict:
    """The arm minus the control on the modules both measured, with a bootstrap interval over modules."""
    from kernelzero.kit.heldout_protocol import paired_difference

    common = sorted(set(arm) & set(control))
    if not common:
        return {"modules": 0}
    mean, low, high = paired_difference([arm[i] for i in common], [control[i] for i in common])
    return {"difference": mean, "low": low, "high": high, "modules": len(common)}


def journal_in(out: Path) -> Journal:
    """`out`'s journal; a directory without one (stopped within its first step) is started again empty."""
    if not (out / "steps.json").exists():
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return Journal(out)


def probe_rows(train_rows: Path, out: Path, count: int) -> Path:
    """out/probe_rows.jsonl: `count` rows spread evenly over the SFT's training rows (written once)."""
    path = out / "probe_rows.jsonl"
    if not path.exists():
        lines = [line for line in train_rows.read_text().splitlines() if line.strip()]
        stride = max(1, len(lines) // count)
        path.write_text("\n".join(lines[::stride][:count]) + "\n")
    return path


def measure(console, journal: Journal, stages: WarmStages, rows: tuple[Path, Path], args, tag: str,
            started: float) -> int:
    """The probe's training rows and the held-out rows answered by the current policy, judged and projected."""
    from kernelzero.app.heldout import publish_heldout

    heldout, probe = rows
    code = journal.run(f"publish probe {tag}", lambda: publish_heldout(stages.config, probe, args.heldout, tag,
                                                                       greedy=False, split="probe"))
    return code or measure_heldout(console, journal, stages, heldout, args.heldout, tag, started)


def run_arm(console, base: Config, arm: str, out: Path, rows: tuple[Path, Path], args, started: float) -> dict:
    """One arm's rounds and measurements in `out`, continued where it stopped; what it measured (also out/arm.json)."""
    done = out / "arm.json"
    if done.exists():
        console.print(f"arm {arm}: read back from {done}")
        return json.loads(done.read_text())
    journal = journal_in(out)
    if journal.done:
        console.print(f"arm {arm}: continuing after {journal.done[-1]}")
    config = arm_config(base, arm, out)
    (out / "kernelzero.toml").write_text(dump_config(config))
    arm_started = time.monotonic()
    tags = []
    with WarmStages(config) as stages:
        for number in range(1, args.rounds + 1):
            code = journal.run(f"round {number}", lambda: run_stages(
                console, STAGES, stages, f"arm {arm}: round {number}/{args.rounds}", started))
            measuring = number == args.rounds or number % max(1, args.measure_every) == 0
            if not code and measuring:
                tags.append(f"r{number}")
                code = measure(console, journal, stages, rows, args, tags[-1], started)
            if code:
                raise RuntimeError(f"arm {arm}: round {number} failed (exit {code}); see the messages above")
    measured = {tag: per_module(config, tag) for tag in tags}
    result = {"arm": arm, "what": ARMS[arm], "seconds": round(time.monotonic() - arm_started, 1),
              "final": measured[tags[-1]], "measured": measured, **summarize(config, CURVE)}
    done.write_text(json.dumps(result, indent=2, default=str))
    return result


def measure_start(console, base: Config, out: Path, rows: tuple[Path, Path], args, started: float) -> dict:
    """Version 0 on the held-out modules, once for every arm (read back when out/start.json exists)."""
    done = out / "start.json"
    if done.exists():
        return json.loads(done.read_text())
    journal = journal_in(out / "start")
    config = pointed_at(base, out / "start")
    (out / "start" / "kernelzero.toml").write_text(dump_config(config))
    with WarmStages(config) as stages:
        code = measure(console, journal, stages, rows, args, "v0", started)
    if code:
        raise RuntimeError(f"the version-0 measurement failed (exit {code})")
    result = per_module(config, "v0")
    done.write_text(json.dumps(result))
    return result


def results(start: dict, arms: dict[str, dict], modules: int) -> dict:
    """Per arm: pass@1 at version 0 and at the end, sampled and greedy, and the paired difference to the control."""
    table = {}
    for arm, measured in arms.items():
        row = {"what": ARMS[arm], "seconds": measured["seconds"]}
        for decoding in (m for m in MEASURES if m in start and m in measured["final"]):
            v0 = {int(k): v for k, v in start[decoding].items()}
            end = {int(k): v for k, v in measured["final"][decoding].items()}
            row[decoding] = {"start": summary_of(v0, modules), "end": summary_of(end, modules)}
            if CONTROL in arms and arm != CONTROL:
                control = {int(k): v for k, v in arms[CONTROL]["final"][decoding].items()}
                row[decoding]["minus_control"] = paired(end, control)
        curve = [r for r in measured["curve"] if r.get("train_samples")]
        row["train_pass_rate"] = {"first": curve[0]["train_pass_rate"] if curve else None,
                                  "lowest": min((r["train_pass_rate"] for r in curve), default=None),
                                  "last": curve[-1]["train_pass_rate"] if curve else None,
                                  "samples": sum(r["train_samples"] for r in curve)}
        row["probe_by_measurement"] = {tag: summary_of(m["probe"], modules)["pass_at_1"]
                                       for tag, m in {"v0": start, **measured.get("measured", {})}.items() if m.get("probe")}
        row["kl_to_start_last"] = next((r["kl_to_start"] for r in reversed(measured["curve"])
                                        if r.get("kl_to_start") is not None), None)
        table[arm] = row
    return table


def markdown(table: dict, args) -> str:
    def interval(s: dict) -> str:
        return f"{s['pass_at_1']:.3f} [{s['low']:.3f}, {s['high']:.3f}] (n={s['modules']})"

    def difference(d: dict | None) -> str:
        return "" if not d or not d.get("modules") else f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"

    titles = {"sampled": "held-out pass@1 sampled", "greedy": "greedy", "pass@k": f"pass@{args.group_size}",
              "probe": "training rows' pass@1 sampled"}
    shown = [m for m in MEASURES if all(m in row for row in table.values())]
    lines = [f"Rounds {args.rounds}, {args.modules} modules proposed a round, G = {args.group_size}; "
             f"{args.heldout} held-out modules, each measurement on the same random draws (a module's sampling seed); "
             "Wilson 95% intervals over modules; differences to the control paired by module with a 95% bootstrap "
             "interval.", "",
             "| arm | " + " | ".join(f"{titles[m]}, v0 -> end | minus control" for m in shown)
             + " | training pass rate first / lowest / last (samples) | KL to start | seconds |",
             "|---|" + "---|---|" * len(shown) + "---|---|---|"]
    for arm, row in table.items():
        t = row["train_pass_rate"]
        rates = " / ".join("-" if t[k] is None else f"{t[k]:.2f}" for k in ("first", "lowest", "last"))
        kl = "-" if row["kl_to_start_last"] is None else f"{row['kl_to_start_last']:.4f}"
        cells = [f"{interval(row[m]['start'])} -> {interval(row[m]['end'])} | {difference(row[m].get('minus_control'))}"
                 for m in shown]
        lines.append(f"| {arm}: {row['what']} | " + " | ".join(cells)
                     + f" | {rates} ({t['samples']}) | {kl} | {row['seconds']:.0f} |")
    probes = [f"{arm}: " + ", ".join(f"{rate:.3f} ({tag})" for tag, rate in row["probe_by_measurement"].items())
              for arm, row in table.items() if row.get("probe_by_measurement")]
    if probes:
        lines += ["", "Training rows' pass@1 sampled at each measurement (the same rows and draws): " + "; ".join(probes)]
    return "\n".join(lines) + "\n"


def plot(start: dict, arms: dict[str, dict], out: Path) -> None:
    """heldout.png: held-out pass@1 (sampled) by policy version per arm; verdicts.png: the verdict mix by version."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    v0 = summary_of(start["sampled"], len(start["sampled"]))
    for arm, measured in arms.items():
        points = [(0, v0["pass_at_1"], v0["low"], v0["high"])] + [
            (r["policy_version"], r["heldout_pass_at_1"], r["heldout_low"], r["heldout_high"])
            for r in measured["curve"] if r.get("heldout_pass_at_1") is not None]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        errors = [[0 if p[2] is None else p[1] - p[2] for p in points], [0 if p[3] is None else p[3] - p[1] for p in points]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=f"{arm}: {ARMS[arm]}")
    ax.set(xlabel="Coder policy version", ylabel="held-out pass@1 (sampled)", ylim=(0, 1),
           title="Held-out pass@1 by policy version (Wilson 95% over modules)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "heldout.png", dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(1, max(1, len(arms)), figsize=(5 * max(1, len(arms)), 4), squeeze=False)
    for ax, (arm, measured) in zip(axes[0], arms.items()):
        versions = sorted({r["policy_version"] for r in measured["verdicts"]})
        verdicts = sorted({r["verdict"] for r in measured["verdicts"]})
        totals = {v: sum(r["samples"] for r in measured["verdicts"] if r["policy_version"] == v) for v in versions}
        for verdict in verdicts:
            ax.plot(versions, [sum(r["samples"] for r in measured["verdicts"]
                                   if r["policy_version"] == v and r["verdict"] == verdict) / totals[v]
                               for v in versions], marker=".", label=verdict)
        ax.set(title=f"arm {arm}: training verdicts", xlabel="Coder policy version", ylabel="share", ylim=(0, 1))
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(out / "verdicts.png", dpi=120)
    plt.close(fig)


def main(args, config: Config) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or set(arms) - set(ARMS):
        console.print(f"[red]kernelzero experiment: --arms takes a comma-separated subset of {', '.join(ARMS)}[/red]")
        return 2
    error = loop_argument_error(args) or ("--measure-every must be at least 1" if args.measure_every < 1 else None)
    if error is not None:
        console.print(f"[red]kernelzero experiment: {error}[/red]")
        return 2
    quiet_libraries()
    out = Path(args.out or f"runs/experiment-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if continuing(console, "experiment", out, args, RUN_ARGUMENTS + ("measure_every",)) is None:
        return 2
    base = loop_config(config, out / "start", args)
    console.rule(f"KernelZero experiment in {out}: arms {', '.join(arms)}")
    if not self_check(console, base):
        console.print("[red]the evaluator rejects the known-good example: stopping[/red]")
        return 1
    started = time.monotonic()
    if (boot := warm_start(console, base, args, Plan(), started, out)) is None:
        return 2
    heldout = Path(boot.distill_dir) / "coder_heldout.jsonl"
    available = sum(1 for line in heldout.read_text().splitlines() if line.strip())
    if available < args.heldout:
        console.print(f"[red]only {available} held-out modules were distilled, {args.heldout} asked for: "
                      "distill more (--distill)[/red]")
        return 2
    rows = (heldout, probe_rows(Path(boot.distill_dir) / "coder_train.jsonl", out, args.heldout))
    start = measure_start(console, base, out, rows, args, started)
    measured = {arm: run_arm(console, base, arm, out / f"arm-{arm}", rows, args, started) for arm in arms}
    table = results(start, measured, args.heldout)
    plot(start, measured, out)
    report = {"arms": table, "settings": {k: v for k, v in vars(args).items() if k != "func"},
              "bootstrap": {"distill_dir": boot.distill_dir, "sft": boot.sft},
              "seconds": round(time.monotonic() - started, 1)}
    (out / "experiment.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "experiment.md").write_text(markdown(table, args))
    console.print(markdown(table, args))
    console.print(f"results: {out / 'experiment.md'}, {out / 'experiment.json'}, plots {out / 'heldout.png'}")
    return 0
