-- Busbar on PostgreSQL, schema version 1: the namespace, membership,
-- ownership and the data of store.Store. Every statement is idempotent.

CREATE TABLE IF NOT EXISTS bb_catalog (
  id             smallint PRIMARY KEY CHECK (id = 1),
  namespace_id   uuid     NOT NULL,
  next_entity_id bigint   NOT NULL,
  version        bigint   NOT NULL,
  secret_check   bytea    NULL
);
INSERT INTO bb_catalog (id, namespace_id, next_entity_id, version)
VALUES (1, gen_random_uuid(), 1, 0) ON CONFLICT (id) DO NOTHING;

CREATE TABLE IF NOT EXISTS bb_node (
  node_id        text        PRIMARY KEY,
  session        bigint      NOT NULL,
  addr           text        NOT NULL,
  expires_at     timestamptz NOT NULL,
  draining       boolean     NOT NULL DEFAULT false,
  started_at     timestamptz NOT NULL,
  binary_version text        NOT NULL,
  schema_max     integer     NOT NULL,
  config_hash    bytea       NOT NULL
);

-- One row per committer of a node: every commit transaction sets its mark,
-- so a commit whose answer was lost can be looked up.
CREATE TABLE IF NOT EXISTS bb_commit_mark (
  node_id  text    NOT NULL,
  slot     integer NOT NULL,
  mark     bigint  NOT NULL,
  PRIMARY KEY (node_id, slot)
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS bb_unit (
  unit_id        bigint      PRIMARY KEY,
  name_key       text        NOT NULL UNIQUE,
  owner_node     text        NULL,
  owner_session  bigint      NULL,
  epoch          bigint      NOT NULL DEFAULT 0,
  state          text        NOT NULL DEFAULT 'free' CHECK (state IN ('free', 'owned', 'releasing')),
  handoff_to     text        NULL,
  handoff_until  timestamptz NULL,
  changed_at     timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS bb_unit_by_owner ON bb_unit (owner_node);

CREATE TABLE IF NOT EXISTS bb_entity (
  unit_id    bigint NOT NULL,
  entity_id  bigint NOT NULL,
  name       text   NOT NULL,
  spec       bytea  NOT NULL,
  last_seq   bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (unit_id, entity_id)
) WITH (fillfactor = 50);
CREATE UNIQUE INDEX IF NOT EXISTS bb_entity_id ON bb_entity (entity_id);

CREATE TABLE IF NOT EXISTS bb_msg (
  unit_id    bigint  NOT NULL,
  entity_id  bigint  NOT NULL,
  seq        bigint  NOT NULL,
  meta       bytea   NOT NULL,
  size       integer NOT NULL,
  data       bytea   NULL,
  body_id    bigint  NULL,
  PRIMARY KEY (unit_id, entity_id, seq)
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX IF NOT EXISTS bb_msg_body ON bb_msg (unit_id, body_id) WHERE body_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS bb_body (
  unit_id  bigint  NOT NULL,
  body_id  bigint  NOT NULL,
  part     integer NOT NULL,
  data     bytea   NOT NULL,
  PRIMARY KEY (unit_id, body_id, part)
);

CREATE TABLE IF NOT EXISTS bb_value (
  unit_id    bigint NOT NULL,
  entity_id  bigint NOT NULL,
  key        text   NOT NULL,
  value      bytea  NOT NULL,
  PRIMARY KEY (unit_id, entity_id, key)
);

ALTER TABLE bb_unit SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE bb_entity SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
