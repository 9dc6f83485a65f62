"""A run report: matplotlib PNGs (Agg backend, no display needed) and an index.html linking them; not a live dashboard.

Plots: the held-out pass rate (pass@1 with its interval, pass@n) over Coder policy versions, pass
rate and failure rates over Coder policy versions, speedup of correct samples over
versions, the verdict mix per version, and a heat map of the frontier's pass rate (diagonal:
single APIs; off the diagonal: API pairs) over the most attempted APIs.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

import duckdb

from kernelzero.schemas import VERDICTS

HEATMAP_APIS = 16
VERDICT_COLORS = {
    "correct": "#2e7d32", "incorrect": "#f9a825", "compile_error": "#c62828", "runtime_error": "#6a1b9a",
    "timeout": "#455a64", "rejected": "#000000", "evaluator_error": "#90caf9", "problem_error": "#bdbdbd",
}


def _figure(title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.set_title(title)
    return fig, ax


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def plot_pass_rate(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    rows = con.execute(
        "SELECT policy_version, pass_rate, compile_error_rate, rejected_rate FROM training_curve "
        "WHERE samples > 0 ORDER BY policy_version"
    ).fetchall()
    fig, ax = _figure("Coder pass rate by policy version")
    versions = [r[0] for r in rows]
    for index, label in ((1, "pass rate"), (2, "compile errors"), (3, "rejected")):
        ax.plot(versions, [r[index] for r in rows], marker="o", label=label)
    ax.set_xlabel("policy version")
    ax.set_ylabel("share of samples")
    ax.set_ylim(0, 1)
    ax.legend()
    _save(fig, path)


def plot_speedup(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    rows = con.execute(
        "SELECT policy_version, median_speedup, geomean_speedup FROM training_curve "
        "WHERE median_speedup IS NOT NULL ORDER BY policy_version"
    ).fetchall()
    fig, ax = _figure("Speedup of correct samples over eager PyTorch")
    versions = [r[0] for r in rows]
    ax.plot(versions, [r[1] for r in rows], marker="o", label="median")
    ax.plot(versions, [r[2] for r in rows], marker="s", label="geometric mean")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("policy version")
    ax.set_ylabel("speedup (x)")
    ax.legend()
    _save(fig, path)


def plot_verdicts(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    rows = con.execute(
        "SELECT coalesce(policy_version, 0) AS v, verdict, count(*) FROM judged GROUP BY ALL ORDER BY v"
    ).fetchall()
    versions = sorted({r[0] for r in rows})
    counts = {(v, verdict): n for v, verdict, n in rows}
    totals = {v: sum(n for (vv, _), n in counts.items() if vv == v) for v in versions}
    fig, ax = _figure("Verdict mix by policy version")
    bottom = [0.0] * len(versions)
    for verdict in VERDICTS:
        shares = [counts.get((v, verdict), 0) / totals[v] for v in versions]
        ax.bar([str(v) for v in versions], shares, bottom=bottom, label=verdict, color=VERDICT_COLORS[verdict])
        bottom = [b + s for b, s in zip(bottom, shares)]
    ax.set_xlabel("policy version")
    ax.set_ylabel("share of samples")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)


def plot_frontier(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    entries = con.execute("SELECT apis, pass_mean, attempts FROM frontier").fetchall()
    singles = sorted(((apis[0], n) for apis, _, n in entries if len(apis) == 1), key=lambda x: (-x[1], x[0]))
    names = sorted(api for api, _ in singles[:HEATMAP_APIS])
    index = {api: i for i, api in enumerate(names)}
    grid = [[float("nan")] * len(names) for _ in names]
    for apis, mean, _ in entries:
        if all(a in index for a in apis):
            i, j = index[apis[0]], index[apis[-1]]
            grid[i][j] = grid[j][i] = mean
    fig, ax = _figure("Frontier: Coder pass rate (posterior mean)")
    fig.set_size_inches(8, 7)
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0)
    short = [n.rsplit(".", 1)[-1] for n in names]
    ax.set_xticks(range(len(names)), short, rotation=60, ha="right", fontsize="small")
    ax.set_yticks(range(len(names)), short, fontsize="small")
    fig.colorbar(image, ax=ax, label="pass rate")
    _save(fig, path)


def plot_heldout(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Held-out pass@1 by policy version, sampled and greedy, with the protocol's 95% intervals over modules."""
    rows = con.execute("SELECT decoding, policy_version, pass_at_1, pass_at_1_low, pass_at_1_high FROM heldout_curve "
                       "ORDER BY decoding, policy_version").fetchall()
    fig, ax = _figure("Held-out pass@1 by Coder policy version")
    for decoding, marker in (("sampled", "o"), ("greedy", "s")):
        mine = [r for r in rows if r[0] == decoding]
        if mine:
            ax.errorbar([r[1] for r in mine], [r[2] for r in mine],
                        yerr=[[r[2] - r[3] for r in mine], [r[4] - r[2] for r in mine]], marker=marker, capsize=3,
                        label=f"pass@1, {decoding} (Wilson 95% over modules)")
    if rows:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no held-out samples in this log", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("policy version")
    ax.set_ylabel("share of held-out modules")
    ax.set_ylim(0, 1)
    _save(fig, path)


PLOTS = (
    ("heldout.png", "Held-out pass rate by policy version", plot_heldout),
    ("pass_rate.png", "Pass rate by policy version", plot_pass_rate),
    ("speedup.png", "Speedup by policy version", plot_speedup),
    ("verdicts.png", "Verdict mix", plot_verdicts),
    ("frontier.png", "Frontier heat map", plot_frontier),
)


def _html_table(cursor) -> str:
    head = "".join(f"<th>{html.escape(d[0])}</th>" for d in cursor.description)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_text(v))}</td>" for v in row) + "</tr>" for row in cursor.fetchall()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return " + ".join(map(str, value))
    return str(value)


def write_report(con: duckdb.DuckDBPyConnection, out: str | Path) -> list[Path]:
    """Render every plot and index.html into `out`; returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, _, plot in PLOTS:
        plot(con, out / name)
        written.append(out / name)
    (events, evaluated, passed, uncharged) = con.execute(
        "SELECT (SELECT count(*) FROM events), count(*), count(*) FILTER (WHERE passed), "
        "(SELECT count(*) FROM uncharged) FROM attempts"
    ).fetchone()
    sections = "".join(f"<h2>{html.escape(title)}</h2><img src='{name}' alt='{html.escape(title)}'>"
                       for name, title, _ in PLOTS)
    frontier = _html_table(con.execute(
        "SELECT kind, apis, attempts, passes, pass_mean, in_band, weight FROM frontier LIMIT 25"))
    failures = _html_table(con.execute("SELECT * FROM failure_summary LIMIT 25"))
    curve = _html_table(con.execute("SELECT * FROM learning_curve"))
    heldout = _html_table(con.execute("SELECT * FROM heldout_curve"))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>KernelZero run report</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:small}} img{{max-width:100%}}</style></head>
<body><h1>KernelZero run report</h1>
<p>{events} events, {evaluated} evaluated samples, {passed} correct
({passed / evaluated if evaluated else 0:.1%}); {uncharged} more not charged to the Coder (evaluator or problem
errors). Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.</p>
{sections}
<h2>Held-out modules (evaluation only)</h2>{heldout}
<h2>Learning curve: training pass rate, held-out pass@1 and KL to the start, by Coder policy version</h2>{curve}
<h2>Frontier (highest weight first)</h2>{frontier}
<h2>Failures</h2>{failures}
</body></html>
"""
    (out / "index.html").write_text(page)
    written.append(out / "index.html")
    return written
