"""JaxBench task modules, one per task id (e.g. ``8p_GEMM``)."""
