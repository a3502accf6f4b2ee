-- The straggler: the rank the others wait for at the collectives (the `waits` view), when one
-- stands out: it causes more than half of all the waiting, at least twice as much as any other
-- rank, and, with measured steps, at least a twentieth of a step (the mean span of a step on a
-- device) per step. Per step is per measured step of a process (the most any process ran).
-- No row when no rank stands out or there are no collectives.
WITH ranked AS (
  SELECT rank, device, process, wait_caused_ns,
         ROW_NUMBER() OVER (ORDER BY wait_caused_ns DESC, device, process, rank) AS place
  FROM waits
),
total AS (
  SELECT SUM(wait_caused_ns) AS total_ns FROM waits
),
runner_up AS (
  SELECT COALESCE(MAX(wait_caused_ns), 0) AS next_ns FROM ranked WHERE place = 2
),
steps_run AS (
  SELECT MAX(n) AS steps
  FROM (SELECT rank, process, COUNT(*) AS n FROM ranges WHERE is_step GROUP BY rank, process)
       per_process
),
step_span AS (
  SELECT AVG(step_ns) AS step_ns FROM rank_steps
)
SELECT b.rank, b.device, b.process, b.wait_caused_ns,
       CASE WHEN s.steps > 0 THEN CAST(b.wait_caused_ns AS DOUBLE) / CAST(s.steps AS DOUBLE) END
         AS wait_caused_ns_per_step
FROM ranked b
CROSS JOIN total t
CROSS JOIN runner_up n
CROSS JOIN steps_run s
CROSS JOIN step_span p
WHERE b.place = 1
  AND b.wait_caused_ns > 0
  AND b.wait_caused_ns * 2 > t.total_ns
  AND b.wait_caused_ns >= 2 * n.next_ns
  AND (s.steps IS NULL OR s.steps = 0 OR p.step_ns IS NULL
       OR CAST(b.wait_caused_ns AS DOUBLE) / CAST(s.steps AS DOUBLE) >= CAST(0.05 AS DOUBLE) * p.step_ns);
