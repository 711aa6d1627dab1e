"""The static side: estimate, jaxpr and XLA cost, LLO dump and parse, analyze, autotune, tuned configs."""
