-- The two rules the headline queries share, as views over `ops`, `ranges` and `rank_steps` (made
-- by a preamble). Plain SQL that DuckDB and Spark SQL both run unchanged.

-- phase_ops: each op under every part of the profile it counts in: its phase (null where no phase
-- claims it), 'measured steps' (ops a measured step claims) and 'whole trace' (every op), as
-- `analyze profile` lays out its rows.
CREATE OR REPLACE TEMPORARY VIEW phase_ops AS
SELECT phase AS part, rank, kind, class, name, duration_ns FROM ops WHERE phase IS NOT NULL
UNION ALL
SELECT 'measured steps' AS part, rank, kind, class, name, duration_ns FROM ops WHERE step IS NOT NULL
UNION ALL
SELECT 'whole trace' AS part, rank, kind, class, name, duration_ns FROM ops;

-- waits: the arrival rule at the collectives. A rank's arrivals are the starts of its
-- communication kernels (those that last at all), inside its measured steps (a step's span on
-- the device, ends included) when the run has steps. The k-th arrivals of every rank are one
-- collective: each rank waits there from its own arrival to the last one's (the latest start;
-- of equals, the lowest device and process), and that waiting is caused by the last rank. Only
-- with two ranks or more, and only as many collectives as the rank with the fewest ran. A rank
-- here is a (rank, device, process) triple with GPU work: a process on a device.
CREATE OR REPLACE TEMPORARY VIEW waits AS
WITH arrivals AS (
  SELECT o.rank, o.device, o.process, o.start_ns
  FROM ops o
  WHERE o.kind = 'kernel' AND o.class = 'communication' AND o.duration_ns > 0
    AND (NOT EXISTS (SELECT 1 FROM rank_steps)
         OR EXISTS (SELECT 1 FROM rank_steps s
                    WHERE s.rank = o.rank AND s.device = o.device AND s.process = o.process
                      AND o.start_ns BETWEEN s.start_ns AND s.start_ns + s.step_ns))
),
numbered AS (
  SELECT rank, device, process, start_ns,
         ROW_NUMBER() OVER (PARTITION BY rank, device, process ORDER BY start_ns) AS k
  FROM arrivals
),
counts AS (
  SELECT rank, device, process, COUNT(*) AS n FROM numbered GROUP BY rank, device, process
),
matched AS (
  SELECT m.rank, m.device, m.process, m.start_ns, m.k
  FROM numbered m
  WHERE (SELECT COUNT(*) FROM counts) >= 2 AND m.k <= (SELECT MIN(n) FROM counts)
),
last_arrivals AS (
  SELECT k, rank AS last_rank, device AS last_device, process AS last_process,
         start_ns AS last_ns
  FROM (SELECT k, rank, device, process, start_ns,
               ROW_NUMBER() OVER (PARTITION BY k ORDER BY start_ns DESC, device, process, rank)
                 AS place
        FROM matched) ordered
  WHERE place = 1
),
waiting AS (
  SELECT m.rank, m.device, m.process, l.last_rank, l.last_device, l.last_process,
         l.last_ns - m.start_ns AS wait_ns
  FROM matched m JOIN last_arrivals l ON m.k = l.k
),
waited AS (
  SELECT rank, device, process, SUM(wait_ns) AS waited_ns
  FROM waiting GROUP BY rank, device, process
),
caused AS (
  SELECT last_rank AS rank, last_device AS device, last_process AS process,
         SUM(wait_ns) AS wait_caused_ns
  FROM waiting GROUP BY last_rank, last_device, last_process
),
pairs AS (
  SELECT DISTINCT rank, device, process FROM ops
)
SELECT p.rank, p.device, p.process,
       COALESCE(w.waited_ns, 0) AS waited_ns,
       COALESCE(c.wait_caused_ns, 0) AS wait_caused_ns
FROM pairs p
LEFT JOIN waited w ON w.rank = p.rank AND w.device = p.device AND w.process = p.process
LEFT JOIN caused c ON c.rank = p.rank AND c.device = p.device AND c.process = p.process;
