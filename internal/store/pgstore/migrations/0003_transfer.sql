-- Busbar on PostgreSQL, schema version 3: the outbox between owners
-- (docs/design/cluster.md §9.3). A transfer is a message on its way from
-- its source unit to a target unit another node owns: inserted by the
-- source's owner in the same fenced transaction that removes the message
-- from its entity, deleted by the target's owner in the same fenced
-- transaction that appends it there. id = (source epoch << 32) | counter
-- grows per source unit, so one source's transfers land in order. Data
-- above the inline limit is in bb_transfer_body, in chunks.

CREATE TABLE IF NOT EXISTS bb_transfer (
  target_unit    bigint      NOT NULL,
  source_unit    bigint      NOT NULL,
  id             bigint      NOT NULL,
  target_entity  bigint      NOT NULL,
  kind           smallint    NOT NULL CHECK (kind BETWEEN 1 AND 4),
  meta           bytea       NOT NULL,
  size           integer     NOT NULL,
  data           bytea       NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (target_unit, source_unit, id)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- A source's owner looks for its orphans (transfers whose target unit was
-- deleted) by source.
CREATE INDEX IF NOT EXISTS bb_transfer_by_source ON bb_transfer (source_unit, id);

CREATE TABLE IF NOT EXISTS bb_transfer_body (
  target_unit bigint  NOT NULL,
  source_unit bigint  NOT NULL,
  id          bigint  NOT NULL,
  part        integer NOT NULL,
  data        bytea   NOT NULL,
  PRIMARY KEY (target_unit, source_unit, id, part)
);
