-- The rank table: per rank (a process on a device), its kernel time over the whole trace, per
-- measured step (means over its steps) the step's span on the device and its compute,
-- communication (all, and the part no compute hid), memory copies (the time only they ran) and
-- idle time, and the waiting at collectives it did and caused (the `waits` view).
WITH steps AS (
  SELECT rank, device, process,
         COUNT(*) AS steps,
         AVG(step_ns) AS step_ns,
         AVG(compute_ns) AS compute_ns,
         AVG(communication_ns) AS communication_ns,
         AVG(exposed_communication_ns) AS exposed_communication_ns,
         AVG(memcpy_ns) AS memcpy_ns,
         AVG(idle_ns) AS idle_ns
  FROM rank_steps
  GROUP BY rank, device, process
),
kernels AS (
  SELECT rank, device, process,
         SUM(CASE WHEN kind IN ('kernel', 'graph') THEN duration_ns ELSE 0 END) AS kernel_ns
  FROM ops
  GROUP BY rank, device, process
)
SELECT k.rank, k.device, k.process,
       COALESCE(s.steps, 0) AS steps,
       k.kernel_ns,
       s.step_ns, s.compute_ns, s.communication_ns, s.exposed_communication_ns, s.memcpy_ns,
       s.idle_ns,
       w.waited_ns, w.wait_caused_ns
FROM kernels k
LEFT JOIN steps s ON s.rank = k.rank AND s.device = k.device AND s.process = k.process
JOIN waits w ON w.rank = k.rank AND w.device = k.device AND w.process = k.process
ORDER BY k.rank, k.device, k.process;
