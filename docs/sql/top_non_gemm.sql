-- The five kernels with the most time per phase (all ranks together) that are not GEMMs: time,
-- launches and share of the phase's kernel time. Kernels group by demangled name (a CUDA graph
-- traced as a whole by its graph); ties in time go by name.
WITH per_kernel AS (
  SELECT part AS phase, name, class, SUM(duration_ns) AS total_ns, COUNT(*) AS launches
  FROM phase_ops
  WHERE kind IN ('kernel', 'graph')
  GROUP BY part, name, class
),
phase_totals AS (
  SELECT phase, SUM(total_ns) AS kernel_ns FROM per_kernel GROUP BY phase
),
ranked AS (
  SELECT phase, name, class, total_ns, launches,
         ROW_NUMBER() OVER (PARTITION BY phase ORDER BY total_ns DESC, name) AS place
  FROM per_kernel
  WHERE class <> 'gemm'
)
SELECT r.phase, r.place, r.name, r.class, r.total_ns, r.launches,
       CAST(r.total_ns AS DOUBLE) / CAST(t.kernel_ns AS DOUBLE) AS share
FROM ranked r JOIN phase_totals t ON t.phase = r.phase
WHERE r.place <= 5
ORDER BY r.phase, r.place;
