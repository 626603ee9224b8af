-- leafmq worker registry on Baidu UidGenerator's WORKER_NODE table
-- (snowflake/dbworker). deploy/schema.sql holds these tables too, with
-- Leaf's leaf_alloc: one file for a whole leafmq database.
--
-- WORKER_NODE is UidGenerator's DDL unchanged but for IF NOT EXISTS. An
-- existing UidGenerator table works as it is: each start inserts one row and
-- takes its ID as the worker id; the table is never altered. dbworker creates
-- it when missing only with Options.CreateTable.
--
--   mariadb -h db -u root -p uid < snowflake/dbworker/schema.sql

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

-- leafmq's time leases of WORKER_NODE ids (UidGenerator keeps none). dbworker
-- creates it itself when missing; it only ever raises LEASE_MS.

CREATE TABLE IF NOT EXISTS LEAF_WORKER_LEASE (
WORKER_ID BIGINT NOT NULL COMMENT 'WORKER_NODE.ID',
LEASE_MS BIGINT NOT NULL COMMENT 'time lease in unix ms, never lowered',
PRIMARY KEY(WORKER_ID)
) COMMENT='leafmq time leases of WORKER_NODE worker ids',ENGINE = INNODB;
