-- DuckDB: the three tables of an `analyze export` dataset as views. Run from the dataset's folder
-- (the OUT of `analyze export OUT ...`), or put its path before each `*/*.parquet`.
CREATE OR REPLACE VIEW ops AS SELECT * FROM read_parquet('ops/*/*.parquet');
CREATE OR REPLACE VIEW ranges AS SELECT * FROM read_parquet('ranges/*/*.parquet');
CREATE OR REPLACE VIEW rank_steps AS SELECT * FROM read_parquet('rank_steps/*/*.parquet');
