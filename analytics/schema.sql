-- The projection's tables. `events` is keyed by event_id: the projection inserts an event's
-- typed rows (evaluations, samples, ...) only when its `events` row was new, so the typed tables
-- need no index of their own. Columns mirror schemas/events.py; token arrays stay in the log.

CREATE TABLE IF NOT EXISTS projection_offsets (
    topic VARCHAR NOT NULL,
    "partition" INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (topic, "partition")
);

-- Records the projection could not use: unknown event types and undecodable bytes.
CREATE TABLE IF NOT EXISTS projection_skipped (
    topic VARCHAR NOT NULL,
    "partition" INTEGER NOT NULL,
    "offset" BIGINT NOT NULL,
    reason VARCHAR NOT NULL,
    error VARCHAR,
    PRIMARY KEY (topic, "partition", "offset")
);

CREATE TABLE IF NOT EXISTS events (
    event_id VARCHAR PRIMARY KEY,
    type VARCHAR NOT NULL,
    schema_version INTEGER,
    produced_at TIMESTAMPTZ,
    correlation_id VARCHAR,
    causation_id VARCHAR,
    producer VARCHAR,
    policy_version INTEGER,
    topic VARCHAR,
    "partition" INTEGER,
    "offset" BIGINT,
    payload JSON
);

CREATE TABLE IF NOT EXISTS evaluations (
    event_id VARCHAR NOT NULL,
    sample_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    backend VARCHAR,
    verdict VARCHAR NOT NULL,
    reason VARCHAR,
    failure_class VARCHAR,
    first_evaluation BOOLEAN NOT NULL,  -- the sample's first evaluation in log order; later ones are re-evaluations
    checks VARCHAR[],
    evidence JSON,
    compile_s DOUBLE,
    trials INTEGER,
    max_abs_err DOUBLE,
    rel_err DOUBLE,
    runtime_ms DOUBLE,
    runtime_iqr_ms DOUBLE,
    timing_n INTEGER,
    ref_eager_ms DOUBLE,
    speedup DOUBLE,
    ref_compile_ms DOUBLE,
    speedup_compile DOUBLE,
    gpu VARCHAR,
    device VARCHAR,
    evaluator_version VARCHAR,
    cached BOOLEAN,
    apis VARCHAR[],
    api_set VARCHAR,  -- apis joined by ' + ': a cheap grouping key for the frontier
    level INTEGER,
    group_size INTEGER,
    turn INTEGER,  -- the sample's repair turn (0: a first answer)
    split VARCHAR,  -- train, or heldout / probe: evaluation only (schemas.Split)
    policy_version INTEGER,
    produced_at TIMESTAMPTZ,
    producer VARCHAR,
    causation_id VARCHAR
);

-- The first evaluation of each sample: its key decides `evaluations.first_evaluation`.
CREATE TABLE IF NOT EXISTS evaluated_samples (
    sample_id VARCHAR PRIMARY KEY,
    event_id VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS samples (
    event_id VARCHAR NOT NULL,
    sample_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    backend VARCHAR,
    source VARCHAR,
    reason VARCHAR,
    group_size INTEGER,
    group_index INTEGER,
    turn INTEGER,
    prompt_hash VARCHAR,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    mean_logprob DOUBLE,
    temperature DOUBLE,
    apis VARCHAR[],
    level INTEGER,
    split VARCHAR,
    policy_version INTEGER,
    produced_at TIMESTAMPTZ,
    producer VARCHAR
);

CREATE TABLE IF NOT EXISTS modules_proposed (
    event_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    source VARCHAR,
    apis VARCHAR[],
    generator VARCHAR,
    level INTEGER,
    prompt_hash VARCHAR,
    completion_tokens INTEGER,
    policy_version INTEGER,
    produced_at TIMESTAMPTZ,
    producer VARCHAR
);

CREATE TABLE IF NOT EXISTS modules_accepted (
    event_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    source VARCHAR,
    apis VARCHAR[],
    fingerprint VARCHAR,
    op_trace VARCHAR[],
    ref_runtime_ms DOUBLE,
    level INTEGER,
    split VARCHAR,
    produced_at TIMESTAMPTZ,
    producer VARCHAR
);

CREATE TABLE IF NOT EXISTS modules_rejected (
    event_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    reason VARCHAR,
    detail VARCHAR,
    apis VARCHAR[],
    produced_at TIMESTAMPTZ,
    producer VARCHAR
);

CREATE TABLE IF NOT EXISTS groups_scored (
    event_id VARCHAR NOT NULL,
    module_id VARCHAR NOT NULL,
    policy_version INTEGER,
    pass_rate DOUBLE,
    gate_open BOOLEAN,
    partial BOOLEAN,
    rule VARCHAR,
    turn INTEGER,
    informative BOOLEAN,
    n_samples INTEGER,
    mean_reward DOUBLE,
    produced_at TIMESTAMPTZ
);

CREATE TABLE IF NOT EXISTS group_samples (
    event_id VARCHAR NOT NULL,
    sample_id VARCHAR NOT NULL,
    module_id VARCHAR,
    verdict VARCHAR,
    reward DOUBLE,
    advantage DOUBLE,
    speedup DOUBLE,
    policy_version INTEGER,
    weight DOUBLE
);

CREATE TABLE IF NOT EXISTS policies (
    event_id VARCHAR NOT NULL,
    role VARCHAR,
    version INTEGER,
    uri VARCHAR,
    sha256 VARCHAR,
    step INTEGER,
    metrics JSON,
    produced_at TIMESTAMPTZ
);
