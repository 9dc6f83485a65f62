"""Datasets rebuilt from the projection: SFT pairs, RL prompts, preference pairs; JSON lines or Parquet, written whole or not at all.

- `sft`: per module, its best correct kernel of any turn (highest speedup, then earliest):
  `prompt` is the Coder's first-turn prompt for the kernel's backend, rendered from the module
  source (`reference`) by the same templates the Coder uses (a repaired kernel thus teaches the
  first answer), and `completion` is the kernel as the Coder must answer it (one fenced python
  block: `codeblocks.answer`, which the Coder's parser reads back).
- `rl`: accepted modules at the frontier: the module's own Beta posterior pass rate (first
  turns only unless [analytics] frontier_turns = "all") lies in [band_low, band_high] (an
  untried module has the prior mean); `frontier_weight` is the highest frontier weight among its
  APIs and API pairs (NULL when none was tried yet). A held-out module, or one the evaluator
  found unusable (any `problem_error`), is left out.
- `pref`: per module and backend, every pair of correct kernels (any turn) where `chosen` is at
  least (1 + min_gain) times faster than `rejected`; `prompt` as for `sft`, both answers as for
  `sft`'s completion.
- `rl`: `prompt` is the module source itself: the Coder renders its own prompt for each target.

`coder_prompt(source, backend, style)` and `python_answer(source)` are functions `install_views` registers;
the prompt style is the Coder's (`[coder] prompt`), passed by the caller.

Kernels that are correct but were never timed (CPU evaluation) have no speedup: they count for
`sft` (ranked last) but not for `pref`.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from kernelzero.analytics.views import view_parameters
from kernelzero.config import AnalyticsConfig

KINDS = ("sft", "rl", "pref")

_FIRST_SAMPLES = """first_samples AS (
    SELECT sample_id, source FROM samples
    QUALIFY row_number() OVER (PARTITION BY sample_id ORDER BY produced_at, event_id) = 1
)"""

QUERIES = {
    "sft": f"""
WITH {_FIRST_SAMPLES}
SELECT a.module_id, a.sample_id, a.backend, a.level, a.apis, a.policy_version, a.speedup,
       coder_prompt(m.source, a.backend, $prompt_style) AS prompt, python_answer(s.source) AS completion, m.source AS reference
FROM attempts a JOIN first_samples s USING (sample_id) JOIN modules m USING (module_id)
WHERE a.passed AND s.source IS NOT NULL AND m.source IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY a.module_id ORDER BY a.speedup DESC NULLS LAST, a.produced_at, a.sample_id) = 1
ORDER BY a.module_id""",
    "rl": """
WITH posterior AS (
    SELECT *, ($prior_alpha + passes) / ($prior_alpha + $prior_beta + attempts) AS pass_mean
    FROM modules WHERE status = 'accepted' AND split = 'train' AND problem_errors = 0
), weights AS (
    SELECT module_id, max(f.weight) AS frontier_weight
    FROM (SELECT module_id, unnest(api_keys(list_sort(list_distinct(apis)))) AS apis FROM posterior) k
    JOIN frontier_at($band_low, $band_high, $target, $prior_alpha, $prior_beta, $explore, $versions, $first_turns) f USING (apis)
    GROUP BY module_id
)
SELECT p.module_id, p.source AS prompt, p.apis, p.level, p.attempts, p.passes, p.pass_mean, w.frontier_weight
FROM posterior p LEFT JOIN weights w USING (module_id)
WHERE p.pass_mean BETWEEN $band_low AND $band_high
ORDER BY w.frontier_weight DESC NULLS FIRST, p.module_id""",
    "pref": f"""
WITH {_FIRST_SAMPLES}, correct AS (
    SELECT a.module_id, a.sample_id, a.backend, a.speedup, s.source
    FROM attempts a JOIN first_samples s USING (sample_id)
    WHERE a.passed AND a.speedup > 0 AND s.source IS NOT NULL
)
SELECT c.module_id, c.backend, coder_prompt(m.source, c.backend, $prompt_style) AS prompt, m.source AS reference,
       python_answer(c.source) AS chosen, python_answer(d.source) AS rejected,
       c.sample_id AS chosen_sample, d.sample_id AS rejected_sample,
       c.speedup AS chosen_speedup, d.speedup AS rejected_speedup
FROM correct c JOIN correct d
     ON c.module_id = d.module_id AND c.backend = d.backend AND c.speedup >= d.speedup * (1 + $min_gain)
JOIN modules m ON m.module_id = c.module_id
WHERE m.source IS NOT NULL
ORDER BY c.module_id, c.backend, chosen_sample, rejected_sample""",
}


def replay_query(kind: str, where: str | None = None) -> str:
    if kind not in QUERIES:
        raise ValueError(f"unknown dataset kind {kind!r}: choose one of {', '.join(KINDS)}")
    query = QUERIES[kind]
    return f"SELECT * FROM ({query}) WHERE {where}" if where else query


def _format(path: Path) -> str:
    if path.suffix == ".jsonl":
        return "json"
    if path.suffix == ".parquet":
        return "parquet"
    raise ValueError(f"{path}: the dataset file must end in .jsonl or .parquet")


def write_dataset(con: duckdb.DuckDBPyConnection, config: AnalyticsConfig, kind: str, path: str | os.PathLike,
                  *, where: str | None = None, min_gain: float = 0.05, prompt_style: str = "full") -> int:
    """Write the dataset to `path` (via a temporary file renamed into place); returns the number of rows."""
    path = Path(path)
    fmt = _format(path)
    query = replay_query(kind, where)
    extra = {"min_gain": min_gain, "prompt_style": prompt_style}
    params = {name: value for name, value in (view_parameters(config) | extra).items()
              if f"${name}" in query}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        target = str(partial).replace("'", "''")
        rows = con.execute(f"COPY ({query}) TO '{target}' (FORMAT {fmt})", params).fetchone()[0]
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return rows

