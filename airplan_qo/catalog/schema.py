"""The catalog's SQL schema and its forward migrations.

The objects live in the ``main`` schema of the catalog file. A :class:`~airplan_qo.catalog.store.
Catalog` attaches the file under the database name :data:`CATALOG_NAME` (``airplan``), so
``airplan.plans`` or ``airplan.ape(...)`` work on its connection whatever the file is called, and
the stock ``duckdb`` CLI opening the default ``airplan.duckdb`` sees the same names. (A schema
called ``airplan`` inside a file called ``airplan.duckdb`` would make every ``airplan.x`` ambiguous
in DuckDB, which is why the objects are not in a schema of that name.)

The DDL is plain SQL and names no database: tables, sequences, views and SQL macros are all
stored in the file, so any DuckDB client can use them without this package (Python UDFs would not
persist; nothing here depends on one). View bodies bind inside the file; table macro bodies bind
where they are called, so they need the catalog to be the default database (it is, on a Catalog
connection and in ``duckdb airplan.duckdb``).

Migrations only move forward. Each one has a version, a description and a list of statements;
:class:`~airplan_qo.catalog.store.Catalog` applies the pending ones in a single transaction and
records each in ``airplan.schema_version``. To change the schema, append a migration and leave
the earlier ones untouched: files already written by them must keep upgrading the same way.
"""

from __future__ import annotations

import attrs

#: The database name a Catalog connection gives the catalog file (``ATTACH ... AS airplan``).
CATALOG_NAME = "airplan"

#: How a client's labels are released (``release_kind`` columns): a Count-Min sketch, or the
#: exact class histogram (depth 1, one cell per class).
COUNT_MIN = "count_min"
HISTOGRAM = "histogram"
RELEASE_KINDS: tuple[str, ...] = (COUNT_MIN, HISTOGRAM)

# Default for every created_at column: the instant of insertion, as a UTC wall-clock TIMESTAMP.
_NOW_UTC = "timezone('UTC', current_timestamp)"


@attrs.frozen
class Migration:
    """One forward step of the schema: the version it produces and the SQL that gets there."""

    version: int
    description: str
    statements: tuple[str, ...]


def _seq(name: str) -> str:
    return f"CREATE SEQUENCE {name} START 1"


_V1: tuple[str, ...] = (
    f"""CREATE TABLE schema_version (
        version INTEGER PRIMARY KEY,
        description VARCHAR NOT NULL,
        applied_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    _seq("workload_id_seq"),
    _seq("topology_id_seq"),
    _seq("planning_run_id_seq"),
    _seq("plan_id_seq"),
    _seq("exec_id_seq"),
    _seq("feedback_id_seq"),
    _seq("calibration_id_seq"),
    _seq("release_id_seq"),
    # ---- workloads and their statistics ----------------------------------------------------
    f"""CREATE TABLE workloads (
        workload_id BIGINT PRIMARY KEY DEFAULT nextval('workload_id_seq'),
        dataset VARCHAR NOT NULL,
        n_clients INTEGER NOT NULL CHECK (n_clients > 0),
        partition_scheme VARCHAR NOT NULL,
        alpha DOUBLE CHECK (alpha IS NULL OR alpha > 0),
        partition_seed BIGINT NOT NULL CHECK (partition_seed >= 0),
        data_seed BIGINT NOT NULL CHECK (data_seed >= 0),
        options JSON NOT NULL DEFAULT '{{}}',
        fingerprint VARCHAR NOT NULL UNIQUE,
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    f"""CREATE TABLE client_sketches (
        workload_id BIGINT NOT NULL,
        stats_version INTEGER NOT NULL CHECK (stats_version >= 1),
        client INTEGER NOT NULL CHECK (client >= 0),
        n_records BIGINT NOT NULL CHECK (n_records >= 0),
        depth INTEGER NOT NULL CHECK (depth > 0),
        width INTEGER NOT NULL CHECK (width > 0),
        hash_seed BIGINT NOT NULL,
        counts INTEGER[] NOT NULL CHECK (len(counts) = depth * width),
        noise_sigma DOUBLE NOT NULL DEFAULT 0 CHECK (noise_sigma >= 0),
        PRIMARY KEY (workload_id, stats_version, client)
    )""",
    f"""CREATE TABLE workload_stats (
        workload_id BIGINT NOT NULL,
        stats_version INTEGER NOT NULL CHECK (stats_version >= 1),
        n_clients INTEGER NOT NULL CHECK (n_clients > 0),
        n_classes INTEGER NOT NULL CHECK (n_classes > 0),
        n_records BIGINT NOT NULL CHECK (n_records >= 0),
        sketch_eps DOUBLE NOT NULL CHECK (sketch_eps > 0 AND sketch_eps < 1),
        sketch_delta DOUBLE NOT NULL CHECK (sketch_delta > 0 AND sketch_delta < 1),
        depth INTEGER NOT NULL CHECK (depth > 0),
        width INTEGER NOT NULL CHECK (width > 0),
        alpha_paper DOUBLE,
        alpha_dirichlet DOUBLE,
        label_entropy DOUBLE,
        sketch_bytes BIGINT NOT NULL CHECK (sketch_bytes >= 0),
        model_bytes BIGINT NOT NULL CHECK (model_bytes >= 0),
        stats_overhead DOUBLE,
        dp_epsilon DOUBLE CHECK (dp_epsilon IS NULL OR dp_epsilon >= 0),
        dp_delta DOUBLE CHECK (dp_delta IS NULL OR (dp_delta >= 0 AND dp_delta < 1)),
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        PRIMARY KEY (workload_id, stats_version)
    )""",
    # ---- topology cache ---------------------------------------------------------------------
    f"""CREATE TABLE topologies (
        topology_id BIGINT PRIMARY KEY DEFAULT nextval('topology_id_seq'),
        family VARCHAR NOT NULL,
        params JSON NOT NULL DEFAULT '{{}}',
        n_nodes INTEGER NOT NULL CHECK (n_nodes > 0),
        seed BIGINT NOT NULL,
        weights_rule VARCHAR NOT NULL,
        n_edges BIGINT NOT NULL CHECK (edges_src IS NULL OR n_edges = len(edges_src)),
        max_degree INTEGER NOT NULL CHECK (max_degree >= 0),
        mean_degree DOUBLE NOT NULL CHECK (mean_degree >= 0),
        lambda2_laplacian DOUBLE,
        lambda2_normalized DOUBLE,
        mixing_rho DOUBLE,
        mixing_gap DOUBLE,
        mixing_p DOUBLE,
        slots_per_round INTEGER CHECK (slots_per_round IS NULL OR slots_per_round > 0),
        slots_lower_bound INTEGER CHECK (slots_lower_bound IS NULL OR slots_lower_bound > 0),
        edges_src INTEGER[],
        edges_dst INTEGER[] CHECK (edges_dst IS NULL OR len(edges_dst) = len(edges_src)),
        weights DOUBLE[] CHECK (weights IS NULL OR len(weights) = len(edges_src)),
        self_weights DOUBLE[] CHECK (self_weights IS NULL OR len(self_weights) = n_nodes),
        compute_ms DOUBLE,
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        UNIQUE (family, params, n_nodes, seed, weights_rule)
    )""",
    # ---- planning ---------------------------------------------------------------------------
    f"""CREATE TABLE planning_runs (
        planning_run_id BIGINT PRIMARY KEY DEFAULT nextval('planning_run_id_seq'),
        workload_id BIGINT,
        statement VARCHAR NOT NULL,
        estimator VARCHAR NOT NULL,
        objective VARCHAR NOT NULL,
        sla VARCHAR,
        sla_threshold DOUBLE,
        n_candidates INTEGER NOT NULL CHECK (n_candidates >= 0),
        chosen_plan_id BIGINT,
        fallback BOOLEAN NOT NULL DEFAULT false,
        warnings VARCHAR[] NOT NULL DEFAULT [],
        planning_time_ms DOUBLE CHECK (planning_time_ms IS NULL OR planning_time_ms >= 0),
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    f"""CREATE TABLE plans (
        plan_id BIGINT PRIMARY KEY DEFAULT nextval('plan_id_seq'),
        planning_run_id BIGINT NOT NULL,
        chosen BOOLEAN NOT NULL DEFAULT false,
        rank INTEGER CHECK (rank IS NULL OR rank >= 1),
        family VARCHAR NOT NULL,
        topology_params JSON NOT NULL DEFAULT '{{}}',
        topology_seed BIGINT,
        weights_rule VARCHAR NOT NULL,
        topology_id BIGINT,
        k_ratio DOUBLE NOT NULL CHECK (k_ratio > 0 AND k_ratio <= 1),
        algorithm VARCHAR NOT NULL,
        snr_db DOUBLE,
        g_th DOUBLE CHECK (g_th IS NULL OR g_th >= 0),
        tx_power_dbm DOUBLE,
        est_rounds DOUBLE CHECK (est_rounds IS NULL OR est_rounds >= 0),
        reaches_target BOOLEAN NOT NULL,
        est_accuracy DOUBLE,
        est_accuracy_lo DOUBLE,
        est_accuracy_hi DOUBLE,
        channel_uses DOUBLE,
        slots DOUBLE,
        airtime_s DOUBLE,
        energy_j DOUBLE,
        bits DOUBLE,
        privacy_epsilon DOUBLE,
        total_cost DOUBLE,
        pruned_reason VARCHAR,
        calibration_ids BIGINT[] NOT NULL DEFAULT [],
        terms JSON NOT NULL DEFAULT '{{}}',
        CHECK (NOT chosen OR pruned_reason IS NULL)
    )""",
    # ---- execution --------------------------------------------------------------------------
    f"""CREATE TABLE executions (
        exec_id BIGINT PRIMARY KEY DEFAULT nextval('exec_id_seq'),
        plan_id BIGINT NOT NULL,
        status VARCHAR NOT NULL DEFAULT 'running'
            CHECK (status IN ('running', 'succeeded', 'failed', 'aborted')),
        started_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        finished_at TIMESTAMP,
        actual_rounds INTEGER CHECK (actual_rounds IS NULL OR actual_rounds >= 0),
        final_accuracy DOUBLE,
        final_loss DOUBLE,
        client_acc_mean DOUBLE,
        client_acc_var DOUBLE,
        jain_fairness DOUBLE,
        data_seed BIGINT NOT NULL,
        train_seed BIGINT NOT NULL,
        channel_seed BIGINT NOT NULL,
        reason VARCHAR,
        checkpoint_path VARCHAR,
        resumed_from BIGINT,
        options JSON NOT NULL DEFAULT '{{}}'
    )""",
    f"""CREATE TABLE round_stats (
        exec_id BIGINT NOT NULL,
        round INTEGER NOT NULL CHECK (round >= 0),
        test_accuracy DOUBLE,
        client_acc_mean DOUBLE,
        client_acc_min DOUBLE,
        train_loss DOUBLE,
        consensus_distance DOUBLE,
        channel_uses DOUBLE,
        slots DOUBLE,
        energy_j DOUBLE,
        bits DOUBLE,
        link_drop_rate DOUBLE,
        dropout_rate DOUBLE,
        wall_time_s DOUBLE,
        PRIMARY KEY (exec_id, round)
    )""",
    # ---- learning from executions -----------------------------------------------------------
    f"""CREATE TABLE feedback (
        feedback_id BIGINT PRIMARY KEY DEFAULT nextval('feedback_id_seq'),
        exec_id BIGINT NOT NULL,
        plan_id BIGINT NOT NULL,
        estimator VARCHAR NOT NULL,
        metric VARCHAR NOT NULL,
        estimated DOUBLE,
        actual DOUBLE,
        model_term DOUBLE,
        censored BOOLEAN NOT NULL DEFAULT false,
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    f"""CREATE TABLE calibration (
        calibration_id BIGINT PRIMARY KEY DEFAULT nextval('calibration_id_seq'),
        estimator VARCHAR NOT NULL,
        scope VARCHAR NOT NULL CHECK (scope IN ('global', 'dataset', 'dataset_family')),
        scope_key VARCHAR NOT NULL DEFAULT '' CHECK (scope <> 'global' OR scope_key = ''),
        constant_name VARCHAR NOT NULL,
        value DOUBLE NOT NULL,
        n_obs INTEGER NOT NULL CHECK (n_obs >= 0),
        fit_error DOUBLE,
        source VARCHAR NOT NULL,
        superseded_by BIGINT CHECK (superseded_by IS NULL OR superseded_by > calibration_id),
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    f"""CREATE TABLE privacy_ledger (
        release_id BIGINT PRIMARY KEY DEFAULT nextval('release_id_seq'),
        workload_id BIGINT NOT NULL,
        stats_version INTEGER NOT NULL CHECK (stats_version >= 1),
        mechanism VARCHAR NOT NULL,
        sensitivity DOUBLE NOT NULL CHECK (sensitivity >= 0),
        sigma DOUBLE NOT NULL CHECK (sigma >= 0),
        epsilon DOUBLE NOT NULL CHECK (epsilon >= 0),
        delta DOUBLE NOT NULL CHECK (delta >= 0 AND delta <= 1),
        cumulative_epsilon DOUBLE NOT NULL CHECK (cumulative_epsilon >= 0),
        cumulative_delta DOUBLE NOT NULL CHECK (cumulative_delta >= 0 AND cumulative_delta <= 1),
        note VARCHAR,
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    # ---- adaptive re-optimisation and advisor evaluation -------------------------------------
    _seq("event_id_seq"),
    _seq("evaluation_id_seq"),
    f"""CREATE TABLE reoptimizations (
        event_id BIGINT PRIMARY KEY DEFAULT nextval('event_id_seq'),
        exec_id BIGINT NOT NULL,
        round INTEGER NOT NULL CHECK (round >= 0),
        trigger VARCHAR NOT NULL,
        detail VARCHAR,
        old_plan_id BIGINT,
        new_plan_id BIGINT,
        planning_run_id BIGINT,
        observed JSON NOT NULL DEFAULT '{{}}',
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    f"""CREATE TABLE evaluations (
        evaluation_id BIGINT PRIMARY KEY DEFAULT nextval('evaluation_id_seq'),
        grid VARCHAR NOT NULL,
        grid_sha VARCHAR NOT NULL,
        seeds INTEGER NOT NULL CHECK (seeds > 0),
        folds INTEGER,
        status VARCHAR NOT NULL DEFAULT 'running'
            CHECK (status IN ('running', 'succeeded', 'failed', 'aborted')),
        report_path VARCHAR,
        summary JSON NOT NULL DEFAULT '{{}}',
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        finished_at TIMESTAMP
    )""",
    """CREATE TABLE evaluation_results (
        evaluation_id BIGINT NOT NULL,
        workload_key VARCHAR NOT NULL,
        calibrated BOOLEAN NOT NULL,
        fold INTEGER,
        advisor_family VARCHAR,
        advisor_plan VARCHAR,
        oracle_family VARCHAR,
        oracle_plan VARCHAR,
        match BOOLEAN,
        regret_acc_pts DOUBLE,
        regret_cost_pct DOUBLE,
        predicted_rounds DOUBLE,
        actual_rounds DOUBLE,
        detail JSON NOT NULL DEFAULT '{}'
    )""",
    # ---- macros (persisted in the file; usable from any DuckDB client) ----------------------
    """CREATE MACRO ape(est, act) AS
        100.0 * abs(est - act) / nullif(abs(act), 0)""",
    """CREATE MACRO rel_err(est, act) AS
        (est - act) / nullif(abs(act), 0)""",
    """CREATE MACRO within(x, lo, hi) AS
        x >= lo AND x <= hi""",
    """CREATE MACRO curve(e) AS TABLE
        SELECT * FROM round_stats WHERE exec_id = e ORDER BY round""",
    """CREATE MACRO candidates(r) AS TABLE
        SELECT * FROM plans WHERE planning_run_id = r
        ORDER BY rank NULLS LAST, plan_id""",
    """CREATE MACRO last_candidates() AS TABLE
        SELECT * FROM plans
        WHERE planning_run_id = (SELECT max(planning_run_id) FROM planning_runs)
        ORDER BY rank NULLS LAST, plan_id""",
    # ---- views (bodies bind inside the file, so they work under any database name) ----------
    """CREATE VIEW v_estimate_vs_actual AS
        SELECT f.feedback_id, f.exec_id, f.plan_id, p.planning_run_id, f.estimator,
               p.family, p.k_ratio, f.metric, f.estimated, f.actual, f.model_term,
               100.0 * abs(f.estimated - f.actual) / nullif(abs(f.actual), 0) AS ape,
               f.censored, f.created_at
        FROM feedback AS f
        JOIN plans AS p ON p.plan_id = f.plan_id""",
    """CREATE VIEW v_current_calibration AS
        SELECT * FROM calibration WHERE superseded_by IS NULL""",
)

_KINDS_SQL = ", ".join(f"'{k}'" for k in RELEASE_KINDS)

# Version 2: label releases have a kind (Count-Min sketch or exact histogram), and a noised
# release keeps no exact record count. DuckDB cannot add a column with a CHECK constraint, so
# both tables are rebuilt. Record counts of earlier noised releases are replaced by the estimate
# the noised cells give (the mean row sum, clipped at 0), and their workload totals by the sum
# of those estimates. Earlier ledger rows are annotated: their noise came from a generator seeded
# with values stored in the catalog.
_V2: tuple[str, ...] = (
    f"""CREATE TABLE client_sketches_v2 (
        workload_id BIGINT NOT NULL,
        stats_version INTEGER NOT NULL CHECK (stats_version >= 1),
        client INTEGER NOT NULL CHECK (client >= 0),
        release_kind VARCHAR NOT NULL DEFAULT '{COUNT_MIN}'
            CHECK (release_kind IN ({_KINDS_SQL})),
        n_records BIGINT NOT NULL CHECK (n_records >= 0),
        depth INTEGER NOT NULL CHECK (depth > 0),
        width INTEGER NOT NULL CHECK (width > 0),
        hash_seed BIGINT NOT NULL,
        counts INTEGER[] NOT NULL CHECK (len(counts) = depth * width),
        noise_sigma DOUBLE NOT NULL DEFAULT 0 CHECK (noise_sigma >= 0),
        CHECK (release_kind <> '{HISTOGRAM}' OR depth = 1),
        PRIMARY KEY (workload_id, stats_version, client)
    )""",
    f"""INSERT INTO client_sketches_v2 (workload_id, stats_version, client, release_kind,
            n_records, depth, width, hash_seed, counts, noise_sigma)
        SELECT workload_id, stats_version, client, '{COUNT_MIN}',
               CASE WHEN noise_sigma > 0
                    THEN greatest(0, round(list_sum(counts) / depth))::BIGINT
                    ELSE n_records END,
               depth, width, hash_seed, counts, noise_sigma
        FROM client_sketches""",
    "DROP TABLE client_sketches",
    "ALTER TABLE client_sketches_v2 RENAME TO client_sketches",
    f"""CREATE TABLE workload_stats_v2 (
        workload_id BIGINT NOT NULL,
        stats_version INTEGER NOT NULL CHECK (stats_version >= 1),
        n_clients INTEGER NOT NULL CHECK (n_clients > 0),
        n_classes INTEGER NOT NULL CHECK (n_classes > 0),
        n_records BIGINT NOT NULL CHECK (n_records >= 0),
        release_kind VARCHAR NOT NULL DEFAULT '{COUNT_MIN}'
            CHECK (release_kind IN ({_KINDS_SQL})),
        sketch_eps DOUBLE NOT NULL CHECK (sketch_eps > 0 AND sketch_eps < 1),
        sketch_delta DOUBLE NOT NULL CHECK (sketch_delta > 0 AND sketch_delta < 1),
        depth INTEGER NOT NULL CHECK (depth > 0),
        width INTEGER NOT NULL CHECK (width > 0),
        alpha_paper DOUBLE,
        alpha_dirichlet DOUBLE,
        label_entropy DOUBLE,
        sketch_bytes BIGINT NOT NULL CHECK (sketch_bytes >= 0),
        model_bytes BIGINT NOT NULL CHECK (model_bytes >= 0),
        stats_overhead DOUBLE,
        dp_epsilon DOUBLE CHECK (dp_epsilon IS NULL OR dp_epsilon >= 0),
        dp_delta DOUBLE CHECK (dp_delta IS NULL OR (dp_delta >= 0 AND dp_delta < 1)),
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        CHECK (release_kind <> '{HISTOGRAM}' OR depth = 1),
        PRIMARY KEY (workload_id, stats_version)
    )""",
    f"""INSERT INTO workload_stats_v2 (workload_id, stats_version, n_clients, n_classes,
            n_records, release_kind, sketch_eps, sketch_delta, depth, width, alpha_paper,
            alpha_dirichlet, label_entropy, sketch_bytes, model_bytes, stats_overhead,
            dp_epsilon, dp_delta, created_at)
        SELECT s.workload_id, s.stats_version, s.n_clients, s.n_classes,
               CASE WHEN s.dp_epsilon IS NULL THEN s.n_records
                    ELSE coalesce((SELECT sum(c.n_records) FROM client_sketches AS c
                                   WHERE c.workload_id = s.workload_id
                                     AND c.stats_version = s.stats_version), 0)::BIGINT END,
               '{COUNT_MIN}', s.sketch_eps, s.sketch_delta, s.depth, s.width, s.alpha_paper,
               s.alpha_dirichlet, s.label_entropy, s.sketch_bytes, s.model_bytes,
               s.stats_overhead, s.dp_epsilon, s.dp_delta, s.created_at
        FROM workload_stats AS s""",
    "DROP TABLE workload_stats",
    "ALTER TABLE workload_stats_v2 RENAME TO workload_stats",
    """UPDATE privacy_ledger
        SET note = concat_ws('; ', note, 'released before schema 2 with noise seeded from '
                             || 'values stored in the catalog: reproducible, so the stated '
                             || 'epsilon does not hold')""",
)

#: Statuses of an execution: ``running`` while a process trains it; ``succeeded``, ``failed``
#: (setup error, divergence) or ``aborted`` (Ctrl-C) as recorded by that process;
#: ``interrupted`` when a later read-write open found it ``running`` with no process left to
#: finish it (killed, crashed, power loss); ``abandoned`` when a user gave it up.
EXECUTION_STATUSES: tuple[str, ...] = ("running", "succeeded", "failed", "aborted", "interrupted",
                                       "abandoned")
_STATUSES_SQL = ", ".join(f"'{s}'" for s in EXECUTION_STATUSES)

# Version 3: recovery. An execution records the process that runs it (owner_pid, owner_host)
# and can end ``interrupted`` (found running after its process died) or ``abandoned``. DuckDB
# cannot change a CHECK constraint, so the table is rebuilt. The catalog gets an identity, a
# random UUID drawn once, which keys where its checkpoints live.
_V3: tuple[str, ...] = (
    f"""CREATE TABLE executions_v3 (
        exec_id BIGINT PRIMARY KEY DEFAULT nextval('exec_id_seq'),
        plan_id BIGINT NOT NULL,
        status VARCHAR NOT NULL DEFAULT 'running'
            CHECK (status IN ({_STATUSES_SQL})),
        started_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        finished_at TIMESTAMP,
        actual_rounds INTEGER CHECK (actual_rounds IS NULL OR actual_rounds >= 0),
        final_accuracy DOUBLE,
        final_loss DOUBLE,
        client_acc_mean DOUBLE,
        client_acc_var DOUBLE,
        jain_fairness DOUBLE,
        data_seed BIGINT NOT NULL,
        train_seed BIGINT NOT NULL,
        channel_seed BIGINT NOT NULL,
        reason VARCHAR,
        checkpoint_path VARCHAR,
        resumed_from BIGINT,
        options JSON NOT NULL DEFAULT '{{}}',
        owner_pid BIGINT,
        owner_host VARCHAR
    )""",
    """INSERT INTO executions_v3 (exec_id, plan_id, status, started_at, finished_at,
            actual_rounds, final_accuracy, final_loss, client_acc_mean, client_acc_var,
            jain_fairness, data_seed, train_seed, channel_seed, reason, checkpoint_path,
            resumed_from, options)
        SELECT exec_id, plan_id, status, started_at, finished_at, actual_rounds, final_accuracy,
               final_loss, client_acc_mean, client_acc_var, jain_fairness, data_seed,
               train_seed, channel_seed, reason, checkpoint_path, resumed_from, options
        FROM executions""",
    "DROP TABLE executions",
    "ALTER TABLE executions_v3 RENAME TO executions",
    f"""CREATE TABLE catalog_info (
        key VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC}
    )""",
    "INSERT INTO catalog_info (key, value) VALUES ('catalog_id', uuid()::VARCHAR)",
)

#: Statuses of an evaluation: ``running`` while a process measures it; ``succeeded``, ``failed``
#: or ``aborted`` (Ctrl-C) as recorded by that process; ``interrupted`` when a later read-write
#: open found it ``running`` and its process gone.
EVALUATION_STATUSES: tuple[str, ...] = ("running", "succeeded", "failed", "aborted",
                                        "interrupted")
_EVAL_STATUSES_SQL = ", ".join(f"'{s}'" for s in EVALUATION_STATUSES)

# Version 4: concurrent access. Training no longer holds the file for the whole run, so a
# ``running`` row is judged by its owner process, not by the file lock: executions and
# evaluations record the owner's start time (``owner_started``, which tells a live process from
# a later one that reuses its PID) and when their owner last wrote progress (``heartbeat_at``).
# Evaluations get owners, a ``reason`` and the ``interrupted`` status; DuckDB cannot change a
# CHECK constraint, so that table is rebuilt.
_V4: tuple[str, ...] = (
    "ALTER TABLE executions ADD COLUMN owner_started VARCHAR",
    "ALTER TABLE executions ADD COLUMN heartbeat_at TIMESTAMP",
    f"""CREATE TABLE evaluations_v4 (
        evaluation_id BIGINT PRIMARY KEY DEFAULT nextval('evaluation_id_seq'),
        grid VARCHAR NOT NULL,
        grid_sha VARCHAR NOT NULL,
        seeds INTEGER NOT NULL CHECK (seeds > 0),
        folds INTEGER,
        status VARCHAR NOT NULL DEFAULT 'running'
            CHECK (status IN ({_EVAL_STATUSES_SQL})),
        report_path VARCHAR,
        summary JSON NOT NULL DEFAULT '{{}}',
        created_at TIMESTAMP NOT NULL DEFAULT {_NOW_UTC},
        finished_at TIMESTAMP,
        reason VARCHAR,
        owner_pid BIGINT,
        owner_host VARCHAR,
        owner_started VARCHAR,
        heartbeat_at TIMESTAMP
    )""",
    """INSERT INTO evaluations_v4 (evaluation_id, grid, grid_sha, seeds, folds, status,
            report_path, summary, created_at, finished_at)
        SELECT evaluation_id, grid, grid_sha, seeds, folds, status, report_path, summary,
               created_at, finished_at
        FROM evaluations""",
    "DROP TABLE evaluations",
    "ALTER TABLE evaluations_v4 RENAME TO evaluations",
)

# Version 5: physical operators. A plan has a transport (over the air or digital packets of
# ``bits_per_coord`` bits per coordinate; ``bits`` stays the total bits the plan sends) beside
# its algorithm; rows of older catalogs are over the air.
_V5: tuple[str, ...] = (
    "ALTER TABLE plans ADD COLUMN transport VARCHAR DEFAULT 'ota'",
    "ALTER TABLE plans ADD COLUMN bits_per_coord INTEGER DEFAULT 32",
    "UPDATE plans SET transport = 'ota' WHERE transport IS NULL",
    "UPDATE plans SET bits_per_coord = 32 WHERE bits_per_coord IS NULL",
)

# Version 6: a planning run can be preceded by a pilot of the fully connected reference
# (``WITH (pilot = 'fc')``): the run names the pilot's execution and keeps what the planner read
# from it (the measured fc and rounds to the target, the pilot's rounds and traffic).
_V6: tuple[str, ...] = (
    "ALTER TABLE planning_runs ADD COLUMN pilot_exec_id BIGINT",
    "ALTER TABLE planning_runs ADD COLUMN pilot JSON",
)

# Version 7: a plan can end its round budget with mixing-only rounds (``mix_rounds``, the
# planner's ``WITH (mix_rounds = 'auto')``); rows of older catalogs train every round.
_V7: tuple[str, ...] = (
    "ALTER TABLE plans ADD COLUMN mix_rounds INTEGER DEFAULT 0",
    "UPDATE plans SET mix_rounds = 0 WHERE mix_rounds IS NULL",
)

# Version 8: a plan's mixing-only tail can run on the complete graph instead of its own topology
# (``mix_on``; NULL: its own topology, as every tail of older catalogs).
_V8: tuple[str, ...] = (
    "ALTER TABLE plans ADD COLUMN mix_on VARCHAR",
)

#: Every migration, oldest first; versions are consecutive from 1.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial catalog: workloads, statistics, topologies, plans, executions, "
                 "feedback, calibration, privacy ledger, views and macros", _V1),
    Migration(2, "label releases get a kind (count_min or histogram); noised releases keep no "
                 "exact record counts", _V2),
    Migration(3, "recovery: executions record their owner process and can end interrupted or "
                 "abandoned; the catalog gets an identity (catalog_info.catalog_id)", _V3),
    Migration(4, "concurrent access: running executions and evaluations are judged by their "
                 "owner process (owner_started, heartbeat_at); evaluations record their owner "
                 "and can end interrupted", _V4),
    Migration(5, "plans record their transport (ota or digital) and bits per coordinate "
                 "(bits_per_coord)",
              _V5),
    Migration(6, "planning runs name the pilot of the fully connected reference they were "
                 "planned with (pilot_exec_id) and what it measured (pilot)", _V6),
    Migration(7, "plans record their mixing-only rounds at the end of the budget "
                 "(mix_rounds)", _V7),
    Migration(8, "plans record where their mixing-only rounds run (mix_on: NULL for their own "
                 "topology, 'complete' for the complete graph)", _V8),
)

#: The schema version this code writes and expects.
SCHEMA_VERSION: int = MIGRATIONS[-1].version

#: Tables whose rows get a generated id, mapped to that id column and its sequence.
ID_COLUMNS: dict[str, str] = {
    "workloads": "workload_id",
    "topologies": "topology_id",
    "planning_runs": "planning_run_id",
    "plans": "plan_id",
    "executions": "exec_id",
    "feedback": "feedback_id",
    "calibration": "calibration_id",
    "privacy_ledger": "release_id",
    "reoptimizations": "event_id",
    "evaluations": "evaluation_id",
}

SEQUENCES: dict[str, str] = {table: f"{column}_seq" for table, column in ID_COLUMNS.items()}

#: Every table of the current schema (``schema_version`` included).
TABLES: tuple[str, ...] = (
    "schema_version", "catalog_info", "workloads", "client_sketches", "workload_stats",
    "topologies",
    "planning_runs", "plans", "executions", "round_stats", "feedback", "calibration",
    "privacy_ledger", "reoptimizations", "evaluations", "evaluation_results",
)

VIEWS: tuple[str, ...] = ("v_estimate_vs_actual", "v_current_calibration")

MACROS: tuple[str, ...] = ("ape", "rel_err", "within", "curve", "candidates", "last_candidates")


def pending(current: int) -> tuple[Migration, ...]:
    """The migrations that bring a catalog at version ``current`` up to :data:`SCHEMA_VERSION`."""
    return tuple(m for m in MIGRATIONS if m.version > current)


def _check_migrations() -> None:
    versions = [m.version for m in MIGRATIONS]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"catalog migrations must be numbered 1..n in order, got {versions}")


_check_migrations()
