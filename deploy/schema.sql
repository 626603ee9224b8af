-- leafmq on MySQL/MariaDB: every table leafd may use, in one file.
--
--   leaf_alloc         Meituan Leaf's segment table, unchanged (--mysql)
--   leaf_alloc_history leafmq's record of the highest max_id of every tag
--   leaf_alloc_mode    leafmq's record of every tag's mode (segment, mono, opaque)
--   leaf_alloc_region  leafmq's record of the region whose ids the database counts
--   WORKER_NODE        Baidu UidGenerator's worker id table, unchanged
--                      (--worker-registry mysql)
--   LEAF_WORKER_LEASE  leafmq's time leases of WORKER_NODE ids
--   LEAF_WORKER_REGION leafmq's count of worker ids per region (--regions)
--
-- Every statement is CREATE TABLE IF NOT EXISTS: running the file on an
-- existing Leaf or UidGenerator database adds only what is missing, and
-- never alters a table. `leafd` creates the tables it uses itself when they
-- are missing (and only then: an account that may only read and write rows
-- works on tables that are there); run this file instead where the service
-- account may not create tables:
--
--   mariadb -h db -u root -p leaf < deploy/schema.sql
--
-- (docker-compose.yml mounts it into MariaDB's /docker-entrypoint-initdb.d.)
-- Statements end with ';' at the end of a line; comments are whole lines
-- starting with '--'.
--
-- ---------------------------------------------------------------------------
-- leaf_alloc: the segment store (segment/mysql).
--
-- An existing Leaf database works as it is: leafmq reads and advances the same
-- rows and never alters the table.
--
-- DEFAULT CHARSET=utf8mb4 is the only addition to Leaf's DDL (its README
-- leaves the database default, often latin1), so that descriptions can hold any
-- text. biz_tag keeps the default, case-insensitive collation, as in Leaf.
-- ENGINE=InnoDB is required: an allocation is an UPDATE and a SELECT in one
-- transaction, and leafmq refuses a table on an engine without transactions.

CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per business tag. Ids of a tag start at max_id; each allocation
-- reserves `step` of them (leafmq's dynamic step may take more in one go).
-- Tags are 1-128 characters of [A-Za-z0-9_-] (they become NATS subject tokens).
--
-- INSERT INTO leaf_alloc (biz_tag, max_id, step, description)
--   VALUES ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id');

-- ---------------------------------------------------------------------------
-- leaf_alloc_history: the highest max_id ever issued for every tag that was
-- ever in leaf_alloc (segment/mysql). leafd raises it in the transaction of
-- every allocation and never lowers it or deletes a row, so that
--
--   * a tag whose leaf_alloc row was deleted is not created again at 1:
--     auto-create and `leafctl tag create` refuse it; an operator brings it
--     back with `leafctl tag restart TAG --floor N`, N at least the record;
--   * an allocation whose range would start below the record (max_id
--     lowered by hand) is refused and rolled back.
--
-- A Leaf database gets a row here for each existing tag when leafd first
-- opens it. Deleting rows of this table gives up that protection.

CREATE TABLE IF NOT EXISTS `leaf_alloc_history` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL COMMENT 'highest max_id ever issued for biz_tag, never lowered',
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the highest max_id of every tag ever in leaf_alloc';

-- ---------------------------------------------------------------------------
-- leaf_alloc_mode: the mode of every tag created by leafmq (segment/mysql):
-- segment, mono (strictly increasing, leaf.mono.<tag>) or opaque (a keyed
-- permutation of the sequence, with the width of its domain and the id of
-- its key). Written once when the tag is created, never changed or deleted,
-- so a deleted and restarted tag keeps its mode. A tag with no row here (a
-- Leaf database, an older leafmq) is segment. Deleting a row gives up that
-- protection: an opaque tag served as a plain one could repeat ids.

CREATE TABLE IF NOT EXISTS `leaf_alloc_mode` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `kind` varchar(16) NOT NULL COMMENT 'segment, mono or opaque; never changed',
  `width` int(11) NOT NULL DEFAULT '0' COMMENT 'opaque: bits of the id domain',
  `key_id` varchar(64) NOT NULL DEFAULT '' COMMENT 'opaque: the id of the permutation key',
  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the mode of every tag ever created, never deleted';

-- ---------------------------------------------------------------------------
-- leaf_alloc_region: with regions (docs/regions.md), the region whose ids
-- this database's rows count: one row, written by the region's first node
-- (--regions, --region-id, --region) and never changed. A node of another
-- region id, region count or name refuses the database (each region needs
-- its own), and so does a node without regions. Empty without regions.

CREATE TABLE IF NOT EXISTS `leaf_alloc_region` (
  `id` tinyint(4) NOT NULL DEFAULT '1' COMMENT 'always 1: one record',
  `regions` int(11) NOT NULL COMMENT '--regions',
  `region_id` int(11) NOT NULL COMMENT '--region-id',
  `region` varchar(128) NOT NULL COMMENT '--region',
  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the region whose ids this database counts, never changed';

-- ---------------------------------------------------------------------------
-- WORKER_NODE: snowflake worker ids (snowflake/dbworker), UidGenerator's DDL
-- unchanged but for IF NOT EXISTS. An existing UidGenerator table works as
-- it is: each start of a node inserts one row and takes its ID as the worker
-- id (DisposableWorkerIdAssigner); the table is never altered. With Leaf's
-- layout (10 worker bits) only 1024 starts fit over the table's whole life:
-- use --worker-registry kv or zk there, or --snowflake-layout uidgen.

CREATE TABLE IF NOT EXISTS WORKER_NODE
(
ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',
HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',
PORT VARCHAR(64) NOT NULL COMMENT 'port',
TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',
LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',
MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',
CREATED TIMESTAMP NOT NULL COMMENT 'created time',
PRIMARY KEY(ID)
)
 COMMENT='DB WorkerID Assigner for UID Generator',ENGINE = INNODB;

-- ---------------------------------------------------------------------------
-- LEAF_WORKER_LEASE: leafmq's time leases of WORKER_NODE ids (UidGenerator
-- keeps none). A node persists "no id after LEASE_MS" here before it uses
-- that time, so a restart with the clock behind cannot repeat an id. leafd
-- only ever raises LEASE_MS.

CREATE TABLE IF NOT EXISTS LEAF_WORKER_LEASE (
REGION VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'region of the worker id; empty without regions',
WORKER_ID BIGINT NOT NULL COMMENT 'WORKER_NODE.ID, or the worker id within REGION',
LEASE_MS BIGINT NOT NULL COMMENT 'time lease in unix ms, never lowered',
OWNER VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'token of the registration holding the id',
PRIMARY KEY(REGION, WORKER_ID)
) COMMENT='leafmq time leases of WORKER_NODE worker ids',ENGINE = INNODB;

-- ---------------------------------------------------------------------------
-- LEAF_WORKER_REGION: with regions (--regions), each region's count of the
-- worker ids it handed out (leafmq's own; unused without regions). With
-- regions, WORKER_NODE rows also carry their region, in a column leafd adds
-- at its first start; where the service account may not alter tables, add
-- it once by hand:
--
--   ALTER TABLE WORKER_NODE ADD COLUMN REGION VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'leafmq region of the worker id';

CREATE TABLE IF NOT EXISTS LEAF_WORKER_REGION (
REGION VARCHAR(64) NOT NULL COMMENT 'region',
LAST_WORKER BIGINT NOT NULL COMMENT 'the last worker id handed out in the region',
PRIMARY KEY(REGION)
) COMMENT='leafmq disposable worker ids per region',ENGINE = INNODB;
