"""Graph search over candidate kernels: a persistent, resumable DAG of kernels and their verdicts.

graph (nodes, ids) -> store (SQLite graph + evaluation cache) -> strategies (what to change) ->
proposer (how a child is written) -> evaluator/remote/objective (how it is judged) -> algorithms
(parallel, beam, evolve) -> report (HTML + JSON) -> cli (`maxkernel-orchestrate search|report`).
"""
