-- Kernel time and GEMM fraction per phase and rank (rank null: all ranks together), with the
-- measured steps and the whole trace as parts of their own. Kernel figures count kernels and
-- CUDA graph executions traced as a whole; memcpy and memset time beside them.
SELECT part AS phase,
       rank,
       SUM(CASE WHEN kind IN ('kernel', 'graph') THEN 1 ELSE 0 END) AS kernels,
       SUM(CASE WHEN kind IN ('kernel', 'graph') THEN duration_ns ELSE 0 END) AS kernel_ns,
       SUM(CASE WHEN class = 'gemm' THEN duration_ns ELSE 0 END) AS gemm_ns,
       CAST(SUM(CASE WHEN class = 'gemm' THEN duration_ns ELSE 0 END) AS DOUBLE)
         / CAST(NULLIF(SUM(CASE WHEN kind IN ('kernel', 'graph') THEN duration_ns ELSE 0 END), 0) AS DOUBLE)
         AS gemm_fraction,
       SUM(CASE WHEN kind = 'memcpy' THEN duration_ns ELSE 0 END) AS memcpy_ns,
       SUM(CASE WHEN kind = 'memset' THEN duration_ns ELSE 0 END) AS memset_ns
FROM phase_ops
GROUP BY GROUPING SETS ((part, rank), (part))
ORDER BY phase, rank NULLS FIRST;
