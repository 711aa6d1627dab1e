"""Port PyTorch and Triton sources to JAX references, and check a port against its source on CPU.

One job per module: `source` loads the PyTorch file (KernelBench `Model`/`get_inputs`/`get_init_inputs`, any
nn.Module with an inputs function, a Triton kernel behind its launcher); `translate` turns the exported
graph into jnp statements (`aten` holds the op table); `write` renders the reference file; `check` runs
source and port on the same inputs over fresh seeds; `run` ties them together for the CLI and MCP tool.
"""
