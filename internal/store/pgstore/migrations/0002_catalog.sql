-- Busbar on PostgreSQL, schema version 2: the catalog (docs/design/cluster.md
-- §17 stage 2). A unit row carries its queue's or topic's name, lower-cased,
-- in name_key (version 1 wrote '#' || unit_id there), so that any node maps a
-- name to its unit; bb_catalog.version grows whenever a unit is created or
-- deleted. Entity ids of a cluster come from one sequence, started past every
-- id a single process handed out before.

UPDATE bb_unit u SET name_key = lower(e.name)
  FROM bb_entity e
 WHERE e.unit_id = u.unit_id AND e.entity_id = u.unit_id AND u.name_key = '#' || u.unit_id;

CREATE SEQUENCE IF NOT EXISTS bb_entity_id_seq AS bigint MINVALUE 1;

SELECT setval('bb_entity_id_seq', greatest(
  (SELECT max(entity_id) FROM bb_entity),
  (SELECT next_entity_id FROM bb_catalog WHERE id = 1),
  (SELECT max(('x' || encode(value, 'hex'))::bit(64)::bigint) FROM bb_value
    WHERE key = 'next-entity-id' AND length(value) = 8),
  1));

UPDATE bb_catalog SET version = version + 1 WHERE id = 1;
