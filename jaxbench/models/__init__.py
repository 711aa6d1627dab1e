"""Model references: whole production layers (one forward step) in plain JAX, random weights, nothing downloaded.

Same format as any task (CONFIG, SIZES with `full` and `small`, create_inputs with the parameters among
the inputs, workload, get_flops); `maxkernel hotspots` breaks them into regions. They live apart from
`tasks/` so the 50-task sheet stays as it is.
"""
