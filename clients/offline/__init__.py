"""The offline model: a template-driven autotuner that speaks the LLM interface (no network, cost 0)."""
