.mode csv
.import /work/main/bench-results/data/rows-5000.csv t
.mode list
-- import_query.sql: the sqlite3 benchmark, read by `sqlite3 :memory:` on stdin after the
-- driver's first line, `.import CSV t`. An in-memory database keeps every page in sqlite's
-- page cache, which comes from malloc; indexes, a join and GROUP BY make sorter and
-- temporary b-tree allocations. The output is the same under every allocator.
CREATE TABLE u AS SELECT id, grp, CAST(score AS REAL) AS score, name FROM t;
CREATE INDEX u_grp ON u(grp, score);
CREATE INDEX u_name ON u(name);
SELECT count(*), sum(score), count(DISTINCT grp) FROM u;
SELECT grp, count(*), round(avg(score), 3), max(name) FROM u GROUP BY grp ORDER BY grp LIMIT 5;
SELECT count(*) FROM u a JOIN u b ON a.name = b.name AND a.id < b.id;
SELECT name, count(*) AS c FROM u GROUP BY name ORDER BY c DESC, name LIMIT 5;
DELETE FROM u WHERE id % 3 = 0;
UPDATE u SET name = name || '-' || id WHERE id % 5 = 0;
SELECT count(*), sum(length(name)) FROM u;
