-- Analysis views over the projected tables, created as TEMP objects on every connection
-- (they work on read-only databases too). Parameters ($band_low, ...) are substituted from
-- [analytics] by views.py; the *_at table macros take them explicitly.

-- A coarse family for an API name such as torch.nn.functional.gelu or nn.Conv2d.
CREATE OR REPLACE TEMP MACRO api_family(api) AS CASE
    WHEN regexp_matches(lower(api), 'conv') THEN 'convolution'
    WHEN regexp_matches(lower(api), 'matmul|\bmm\b|bmm|linear|einsum|addmm|baddbmm|\bdot\b|tensordot') THEN 'matmul'
    WHEN regexp_matches(lower(api), 'attention|softmax') THEN 'softmax_attention'
    WHEN regexp_matches(lower(api), 'norm') THEN 'normalization'
    WHEN regexp_matches(lower(api), 'pool') THEN 'pooling'
    WHEN regexp_matches(lower(api), 'relu|gelu|silu|sigmoid|tanh|elu|swish|mish|hardtanh|softplus|activation') THEN 'activation'
    WHEN regexp_matches(lower(api), '\b(sum|mean|max|min|prod|argmax|argmin|cumsum|cumprod|logsumexp|amax|amin|var|std)\b') THEN 'reduction'
    WHEN regexp_matches(lower(api), 'loss|entropy|nll|mse') THEN 'loss'
    WHEN regexp_matches(lower(api), 'cat|stack|transpose|permute|reshape|view|gather|scatter|index|split|chunk|flip|roll') THEN 'layout'
    ELSE 'elementwise_other'
END;

-- The frontier keys of a module's API list: each API alone, then each unordered pair.
CREATE OR REPLACE TEMP MACRO api_keys(apis) AS list_concat(
    list_transform(apis, lambda a: [a]),
    flatten(list_transform(range(1, len(apis) + 1),
                           lambda i: list_transform(range(i + 1, len(apis) + 1), lambda j: [apis[i], apis[j]]))));

-- One row per evaluated sample (its first evaluation; re-evaluations are left out), whatever its
-- verdict. Policy version and APIs come from the sample only where the evaluation lacks them, so
-- the join touches only those rows.
CREATE OR REPLACE TEMP VIEW judged AS
SELECT * EXCLUDE (first_evaluation), verdict = 'correct' AS passed
FROM evaluations
WHERE first_evaluation AND policy_version IS NOT NULL AND len(apis) > 0
UNION ALL BY NAME
SELECT e.* EXCLUDE (first_evaluation, policy_version, apis, api_set),
       coalesce(e.policy_version, s.policy_version) AS policy_version,
       CASE WHEN len(e.apis) > 0 THEN e.apis ELSE coalesce(s.apis, []) END AS apis,
       CASE WHEN len(e.apis) > 0 THEN e.api_set ELSE array_to_string(coalesce(s.apis, []), ' + ') END AS api_set,
       e.verdict = 'correct' AS passed
FROM (SELECT * FROM evaluations WHERE first_evaluation AND (policy_version IS NULL OR len(apis) = 0)) e
LEFT JOIN samples s ON s.sample_id = e.sample_id
QUALIFY row_number() OVER (PARTITION BY e.event_id ORDER BY s.produced_at, s.event_id) = 1;

-- The Coder's attempts: judged samples less those nobody's sample is to blame for (the evaluator's
-- own errors, unusable problems: schemas.UNCHARGED_VERDICTS). Frontier, failures, speedups and
-- the training curve's rates count attempts only.
CREATE OR REPLACE TEMP VIEW attempts AS
SELECT * FROM judged WHERE verdict NOT IN $uncharged_verdicts;

-- Samples that were not the Coder's to answer for, with what went wrong (reason and evidence).
CREATE OR REPLACE TEMP VIEW uncharged AS
SELECT sample_id, module_id, backend, level, policy_version, verdict, reason, evidence, evaluator_version, produced_at
FROM judged WHERE verdict IN $uncharged_verdicts;

-- The frontier per API and per API pair (see frontier.py for the definition of the weight);
-- with first_turns, repair answers do not count (a repaired pass is not a first-shot pass); held-out
-- samples never count.
CREATE OR REPLACE TEMP MACRO frontier_at(band_low, band_high, target, prior_alpha, prior_beta, explore, versions, first_turns) AS TABLE
WITH combos AS MATERIALIZED (
    -- one row per API combination and version first: the expansion into keys then touches few rows
    -- (grouped by the api_set string, which hashes faster than the list)
    SELECT api_set, coalesce(policy_version, 0) AS version, count(*) AS n, count(*) FILTER (WHERE passed) AS k,
           sum(ln(speedup)) FILTER (WHERE passed AND speedup > 0) AS log_speedup,
           count(*) FILTER (WHERE passed AND speedup > 0) AS timed
    FROM attempts WHERE split = 'train' AND (turn = 0 OR NOT first_turns) GROUP BY ALL
), recent AS (
    SELECT * FROM combos
    WHERE api_set <> '' AND (versions <= 0 OR version > (SELECT coalesce(max(version), 0) FROM combos) - versions)
), keyed AS (
    SELECT unnest(api_keys(string_split(api_set, ' + '))) AS apis, n, k, log_speedup, timed FROM recent
), counts AS (
    SELECT apis, sum(n) AS attempts, sum(k) AS passes, exp(sum(log_speedup) / nullif(sum(timed), 0)) AS geomean_speedup
    FROM keyed GROUP BY apis
), posterior AS (
    SELECT *, prior_alpha + passes AS alpha, prior_beta + attempts - passes AS beta FROM counts
), moments AS (
    SELECT *, alpha / (alpha + beta) AS pass_mean,
           sqrt(alpha * beta / ((alpha + beta) ^ 2 * (alpha + beta + 1))) AS pass_std,
           sqrt(prior_alpha * prior_beta / ((prior_alpha + prior_beta) ^ 2 * (prior_alpha + prior_beta + 1))) AS prior_std
    FROM posterior
)
SELECT CASE WHEN len(apis) = 1 THEN 'api' ELSE 'pair' END AS kind, apis,
       attempts::BIGINT AS attempts, passes::BIGINT AS passes, (attempts - passes)::BIGINT AS failures,
       alpha, beta, pass_mean, pass_std,
       pass_mean BETWEEN band_low AND band_high AS in_band,
       band_closeness(pass_mean, band_low, target, band_high) + explore * pass_std / prior_std AS weight,
       geomean_speedup
FROM moments
ORDER BY weight DESC, kind, apis;

-- Failed samples with their class; mismatches bucketed by the order of magnitude of rel_err.
CREATE OR REPLACE TEMP VIEW failures AS
SELECT sample_id, module_id, backend, level, policy_version, apis, verdict, reason, failure_class,
       CASE WHEN verdict <> 'incorrect' THEN NULL
            WHEN rel_err IS NULL OR isnan(rel_err) THEN 'unmeasured'
            WHEN rel_err < 1e-3 THEN 'rel_err<1e-3'
            WHEN rel_err < 1e-2 THEN 'rel_err<1e-2'
            WHEN rel_err < 1e-1 THEN 'rel_err<1e-1'
            WHEN rel_err < 1 THEN 'rel_err<1'
            ELSE 'rel_err>=1' END AS mismatch_bucket,
       rel_err, max_abs_err, evidence
FROM attempts WHERE NOT passed;

CREATE OR REPLACE TEMP VIEW failure_summary AS
SELECT verdict, coalesce(failure_class, '') AS failure_class, coalesce(mismatch_bucket, '') AS mismatch_bucket,
       count(*) AS samples,
       round(count(*) / sum(count(*)) OVER (), 4) AS share,
       min(sample_id) AS example_sample
FROM failures GROUP BY ALL ORDER BY samples DESC, verdict, failure_class, mismatch_bucket;

-- Speedups of correct samples, per level, API family and backend (a sample counts once per family it touches).
CREATE OR REPLACE TEMP VIEW speedups AS
WITH fam AS (
    SELECT DISTINCT sample_id, level, backend, unnest(list_transform(apis, lambda a: api_family(a))) AS family, speedup
    FROM attempts WHERE passed AND speedup IS NOT NULL AND speedup > 0
)
SELECT level, family, backend, count(*) AS samples,
       quantile_cont(speedup, 0.1) AS p10, median(speedup) AS p50, quantile_cont(speedup, 0.9) AS p90,
       exp(avg(ln(speedup))) AS geomean, avg((speedup > 1)::INT) AS share_faster
FROM fam GROUP BY ALL ORDER BY level, family, backend;

-- Training curve of the Coder: per policy version, what its samples achieved and what they earned.
CREATE OR REPLACE TEMP VIEW training_curve AS
WITH evals AS (
    SELECT coalesce(policy_version, 0) AS policy_version, count(*) AS samples, avg(passed::INT) AS pass_rate,
           avg((verdict = 'compile_error')::INT) AS compile_error_rate,
           avg((verdict = 'rejected')::INT) AS rejected_rate,
           median(speedup) FILTER (WHERE passed) AS median_speedup,
           exp(avg(ln(speedup)) FILTER (WHERE passed AND speedup > 0)) AS geomean_speedup
    FROM attempts WHERE split = 'train' GROUP BY 1
), rewards AS (
    SELECT policy_version, count(DISTINCT event_id) AS groups, avg(reward) AS mean_reward
    FROM group_samples GROUP BY 1
), unscored AS (
    SELECT coalesce(policy_version, 0) AS policy_version, count(*) AS uncharged FROM uncharged GROUP BY 1
), drift AS (
    -- the trainer's step that made a version measured it: KL to the policy RL started from, on that step's tokens
    SELECT version AS policy_version, max((metrics->>'kl_to_start')::DOUBLE) AS kl_to_start
    FROM policies WHERE role = 'coder' GROUP BY 1
)
SELECT policy_version, coalesce(samples, 0) AS samples, pass_rate, compile_error_rate, rejected_rate,
       median_speedup, geomean_speedup, coalesce(groups, 0) AS groups, mean_reward,
       coalesce(uncharged, 0) AS uncharged, kl_to_start
FROM evals FULL OUTER JOIN rewards USING (policy_version) FULL OUTER JOIN unscored USING (policy_version)
LEFT JOIN drift USING (policy_version)
ORDER BY policy_version;

-- Every module with its status (accepted wins over rejected, which wins over proposed) and Coder results
-- (attempts and passes of first turns only, unless [analytics] frontier_turns = "all"; best_speedup of any turn).
CREATE OR REPLACE TEMP VIEW modules AS
WITH proposed AS (
    SELECT module_id, arg_min(source, produced_at) AS source, arg_min(apis, produced_at) AS apis,
           arg_min(generator, produced_at) AS generator, arg_min(policy_version, produced_at) AS proposer_version,
           min(produced_at) AS proposed_at
    FROM modules_proposed GROUP BY module_id
), accepted AS (
    SELECT module_id, arg_min(source, produced_at) AS source, arg_min(apis, produced_at) AS apis,
           arg_min(fingerprint, produced_at) AS fingerprint, arg_min(level, produced_at) AS level,
           arg_min(split, produced_at) AS split, min(produced_at) AS accepted_at
    FROM modules_accepted GROUP BY module_id
), rejected AS (
    SELECT module_id, arg_min(reason, produced_at) AS reject_reason, arg_min(apis, produced_at) AS apis
    FROM modules_rejected GROUP BY module_id
), results AS (
    SELECT module_id,
           count(*) FILTER (WHERE verdict NOT IN $uncharged_verdicts AND (turn = 0 OR NOT $first_turns)) AS attempts,
           count(*) FILTER (WHERE passed AND (turn = 0 OR NOT $first_turns)) AS passes,
           max(speedup) FILTER (WHERE passed) AS best_speedup,
           count(*) FILTER (WHERE verdict = 'problem_error') AS problem_errors
    FROM judged GROUP BY module_id
)
SELECT module_id,
       CASE WHEN a.module_id IS NOT NULL THEN 'accepted' WHEN r.module_id IS NOT NULL THEN 'rejected'
            ELSE 'proposed' END AS status,
       coalesce(a.source, p.source) AS source, coalesce(a.apis, p.apis, r.apis) AS apis, a.level,
       coalesce(a.split, 'train') AS split,
       p.generator, p.proposer_version, a.fingerprint, r.reject_reason,
       coalesce(p.proposed_at, a.accepted_at) AS first_seen,
       coalesce(x.attempts, 0) AS attempts, coalesce(x.passes, 0) AS passes, x.best_speedup,
       coalesce(x.problem_errors, 0) AS problem_errors  -- the evaluator found the module itself unusable
FROM proposed p FULL OUTER JOIN accepted a USING (module_id)
     FULL OUTER JOIN rejected r USING (module_id) LEFT JOIN results x USING (module_id);

-- Proposer statistics per proposer policy version and generator. A module is novel when no
-- module accepted before it shares its fingerprint; `near_target` is the mean |pass rate - target|
-- over its accepted modules that the Coder attempted (lower is better).
CREATE OR REPLACE TEMP MACRO proposer_stats_at(band_low, band_high, target) AS TABLE
WITH ranked AS (
    SELECT *, status = 'accepted' AND row_number() OVER (
                  PARTITION BY fingerprint ORDER BY first_seen, module_id) = 1 AS novel,
           CASE WHEN attempts > 0 THEN passes / attempts END AS pass_rate
    FROM modules
)
SELECT coalesce(proposer_version, 0) AS proposer_version, coalesce(generator, '') AS generator,
       count(*) AS modules,
       count(*) FILTER (WHERE status = 'accepted') AS accepted,
       count(*) FILTER (WHERE status = 'rejected') AS rejected,
       count(*) FILTER (WHERE status = 'accepted') / nullif(count(*) FILTER (WHERE status <> 'proposed'), 0) AS validity_rate,
       count(*) FILTER (WHERE novel) / nullif(count(*) FILTER (WHERE status = 'accepted'), 0) AS novelty_rate,
       avg(pass_rate) AS coder_pass_rate,
       avg(abs(pass_rate - target)) AS near_target,
       avg((pass_rate BETWEEN band_low AND band_high)::INT) AS in_band_rate
FROM ranked WHERE split = 'train' GROUP BY ALL ORDER BY proposer_version, generator;

-- The Coder on held-out modules (split 'heldout': evaluation only), per policy version and decoding
-- (sampled at the Coder's temperature, or greedy), by the held-out protocol (kernelzero/kit/heldout_protocol.py):
-- unbiased pass@1 (the mean over modules of c/n) with Wilson's 95% interval over modules, pass@n (a module
-- solved by any of its n samples), fast_1 (share of samples correct and faster than eager) and the geometric
-- mean speedup of correct samples.
CREATE OR REPLACE TEMP VIEW heldout_curve AS
WITH per_module AS (
    SELECT coalesce(a.policy_version, 0) AS policy_version,
           CASE WHEN s.temperature = 0 THEN 'greedy' ELSE 'sampled' END AS decoding, a.module_id, count(*) AS n,
           count(*) FILTER (WHERE a.passed) AS c, count(*) FILTER (WHERE a.passed AND a.speedup > 1) AS fast,
           sum(ln(a.speedup)) FILTER (WHERE a.passed AND a.speedup > 0) AS log_speedup,
           count(*) FILTER (WHERE a.passed AND a.speedup > 0) AS timed
    FROM attempts a LEFT JOIN samples s USING (sample_id) WHERE a.split = 'heldout' GROUP BY ALL
)
SELECT policy_version, decoding, count(*) AS modules, sum(n)::BIGINT AS samples, min(n) AS samples_per_module,
       avg(c / n) AS pass_at_1, wilson_low(avg(c / n), count(*)) AS pass_at_1_low,
       wilson_high(avg(c / n), count(*)) AS pass_at_1_high,
       avg((c > 0)::INT) AS pass_at_n,
       sum(fast) / sum(n) AS fast_1,
       exp(sum(log_speedup) / nullif(sum(timed), 0)) AS geomean_speedup
FROM per_module GROUP BY ALL ORDER BY policy_version, decoding;

-- What each Coder policy version did, in one row: its training pass rate (with Wilson's interval over its
-- training samples), held-out pass@1 sampled and greedy (intervals over modules), and its KL to the start.
CREATE OR REPLACE TEMP VIEW learning_curve AS
SELECT policy_version, t.samples AS train_samples, t.pass_rate AS train_pass_rate,
       wilson_low(t.pass_rate, t.samples) AS train_low, wilson_high(t.pass_rate, t.samples) AS train_high,
       h.modules AS heldout_modules, h.pass_at_1 AS heldout_pass_at_1, h.pass_at_1_low AS heldout_low,
       h.pass_at_1_high AS heldout_high, g.pass_at_1 AS heldout_greedy, t.kl_to_start
FROM training_curve t
FULL OUTER JOIN (SELECT * FROM heldout_curve WHERE decoding = 'sampled') h USING (policy_version)
LEFT JOIN (SELECT * FROM heldout_curve WHERE decoding = 'greedy') g USING (policy_version)
ORDER BY policy_version;

CREATE OR REPLACE TEMP VIEW frontier AS
SELECT * FROM frontier_at($band_low, $band_high, $target, $prior_alpha, $prior_beta, $explore, $versions, $first_turns);

CREATE OR REPLACE TEMP VIEW proposer_stats AS
SELECT * FROM proposer_stats_at($band_low, $band_high, $target);
