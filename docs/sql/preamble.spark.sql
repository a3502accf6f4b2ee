-- Spark SQL: the three tables of an `analyze export` dataset as views. Paths are relative to the
-- working folder (the OUT of `analyze export OUT ...`); on a cluster, give the dataset's URI.
CREATE OR REPLACE TEMPORARY VIEW ops USING parquet OPTIONS (path 'ops');
CREATE OR REPLACE TEMPORARY VIEW ranges USING parquet OPTIONS (path 'ranges');
CREATE OR REPLACE TEMPORARY VIEW rank_steps USING parquet OPTIONS (path 'rank_steps');
